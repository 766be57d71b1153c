"""The simplest :class:`~.informer.EventHandler`: the current objects by (namespace, name).

Enough for lookups that need no parsing (which ClusterQueue a LocalQueue points at, a Node's
labels) and for tests, which compare it with the simulator's truth.
"""

from __future__ import annotations

from typing import Any

from .informer import object_key


class ObjectCache:
    """Current objects keyed by ``(namespace, name)`` (namespace "" for cluster-scoped)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.replaces = 0  # how many (re)lists were applied
        self.events = 0  # how many watch events were applied

    def replace(self, objects: list[dict[str, Any]]) -> None:
        self.objects = {object_key(o): o for o in objects}
        self.replaces += 1

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.events += 1
        if event_type == "DELETED":
            self.objects.pop(object_key(obj), None)
        else:
            self.objects[object_key(obj)] = obj

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def versions(self) -> dict[tuple[str, str], str]:
        """Key -> resourceVersion: equal to the server's when nothing was lost or invented."""
        return {k: str(o.get("metadata", {}).get("resourceVersion", "")) for k, o in self.objects.items()}
