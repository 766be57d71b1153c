"""The collector: Kueue objects (and PodGroups) parsed into records, joined, rendered as metrics.

:func:`build_collector` is the one place that assembles the store and the handler of every
watched resource; ``gangscope collector`` feeds it from informers and ``gangscope snapshot``
from a dump, so both go through the same parsing and rendering code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from typing import Any

from ..exposition import Exposition
from .gangs import DEFAULT_ASSEMBLY_TIMEOUT, GangIndex, attach_gangs
from .store import ClusterStore, ResourceHandler

__all__ = ["ClusterStore", "GangIndex", "ResourceHandler", "build_collector"]


def build_collector(exposition: Exposition, *, gpu_resources: Sequence[str] = ("nvidia.com/gpu",),
                    level_keys: Sequence[str] = (), alias_overrides: Mapping[str, str] | None = None,
                    assembly_timeout: float = DEFAULT_ASSEMBLY_TIMEOUT,
                    ) -> tuple[ClusterStore, dict[str, Any], GangIndex]:
    """The store, the gang index joined onto it, and every handler keyed by ``Resource.source``
    (see exporter.kube.resources): Kueue objects and Nodes go to the store, the PodGroup
    sources (podgroups_*, workloads_native) to the gang index.
    """
    store = ClusterStore(exposition, gpu_resources=gpu_resources, level_keys=level_keys,
                         alias_overrides=alias_overrides)
    gangs = attach_gangs(store, assembly_timeout=assembly_timeout)
    handlers: dict[str, Any] = {**store.handlers(), **gangs.handlers()}
    return store, handlers, gangs
