"""Assembly of the collector's state: :func:`build_collector` is the one place that builds the
store, joins the gang index onto it and returns the handler of every watched resource;
``gangscope collector`` feeds it from informers, ``snapshot`` and ``explain`` from a dump, so all
go through the same parsing and rendering code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..exposition import Exposition
from .gangs import DEFAULT_ASSEMBLY_TIMEOUT, GangIndex, attach_gangs
from .store import ClusterStore


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
