"""The agent's own Node: its labels become ``node`` plus the topology labels on every series.

Watched by ``metadata.name=<node>`` so a label change (a node moved between racks, Topograph
relabelling blocks) reaches the series within seconds. Until the Node is read, or without
Kubernetes access, the topology labels are empty except ``host``, which is the node name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..topology import TopologyLevels


class NodeTopology:
    """Informer handler (``replace``/``apply``) for the agent's Node; ``labels`` is read on every render."""

    def __init__(self, node_name: str, levels: TopologyLevels, on_change: Callable[[], None]) -> None:
        self.node_name = node_name
        self.levels = levels
        self.on_change = on_change
        self.node_labels: Mapping[str, str] = {}
        self.labels: tuple[tuple[str, str], ...] = self._compute({})

    def _compute(self, node_labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return (("node", self.node_name), *self.levels.labels_from_node(node_labels, self.node_name))

    def base_labels(self) -> tuple[tuple[str, str], ...]:
        return self.labels

    def _set(self, node_labels: Mapping[str, str]) -> None:
        self.node_labels = node_labels
        labels = self._compute(node_labels)
        if labels != self.labels:
            self.labels = labels
            self.on_change()

    def _labels_of(self, obj: Mapping[str, Any]) -> Mapping[str, str] | None:
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") != self.node_name:
            return None
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise ValueError(f"node {self.node_name} has malformed labels")
        return labels

    def replace(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            labels = self._labels_of(obj)
            if labels is not None:
                self._set(labels)
                return
        self._set({})

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        labels = self._labels_of(obj)
        if labels is not None:
            self._set({} if event_type == "DELETED" else labels)
