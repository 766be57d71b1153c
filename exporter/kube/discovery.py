"""Which version of a resource the API server serves, if any.

Kueue moved Workload and Topology from v1beta1 (and v1alpha1) to v1beta2; scheduler-plugins,
Volcano and Kubernetes' own PodGroup may or may not be installed. Discovery reads the group's
versions (``/apis/<group>``, ``/api`` for core) and each candidate version's resource list, and
returns the first of :attr:`Resource.versions` that serves the resource's plural.
"""

from __future__ import annotations

from typing import Any

from .client import KubeClient, NotFound
from .resources import Resource


async def served_version(client: KubeClient, resource: Resource) -> str | None:
    """The preferred served version of ``resource``, or None when it is not served.

    Raises :class:`~.client.ApiError` for anything but "not found" (403 on discovery, 5xx,
    transport), which the caller treats as "unknown, retry later"."""
    try:
        if resource.group:
            group: Any = await client.get_json(f"/apis/{resource.group}")
            entries = group.get("versions") if isinstance(group, dict) else None
            served = {e.get("version") for e in entries or [] if isinstance(e, dict)}
        else:
            core: Any = await client.get_json("/api")
            served = set(core.get("versions") or []) if isinstance(core, dict) else set()
    except NotFound:
        return None
    for version in resource.versions:
        if version not in served:
            continue
        path = f"/apis/{resource.group}/{version}" if resource.group else f"/api/{version}"
        try:
            listing: Any = await client.get_json(path)
        except NotFound:
            continue
        names = {r.get("name") for r in (listing.get("resources") or []) if isinstance(r, dict)} if isinstance(listing, dict) else set()
        if resource.plural in names:
            return version
    return None
