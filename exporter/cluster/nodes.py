"""Nodes: their labels (the topology path of a hostname) and what their GPUs can take.

Kueue stores the value of the node's ``kubernetes.io/hostname`` label in assignments and the
node *name* in ``unhealthyNodes``; both usually agree, and the record keeps both so either
lookup works. For the capacity of each topology domain (:mod:`.capacity`) the record also
keeps what Kueue's topology-aware scheduling reads of a Node, and nothing else: Kueue's own
node cache strips each Node to its name, labels, taints, ``spec.unschedulable`` and
``status.allocatable`` (kueue pkg/cache/scheduler/tas_nodes_cache.go:133-150) and adds the Ready
condition (:57-60). A full Node (images, addresses, managed fields, annotations) is 10-30 kB of
JSON; the record is a few hundred bytes beyond its labels (bench/nodes.py measures 5,000).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..fields import ParseError, Problems, as_bool, as_dict, as_list, interned_map, parse_quantity, str_map
from ..taints import Taint, parse_taints, scheduling_taints
from ..topology import HOSTNAME_LABEL
from .resources import resource_list

_intern = sys.intern


@dataclass(slots=True)
class Node:
    name: str
    labels: dict[str, str]
    problems: list[str]
    gpus: float = 0  # status.allocatable of the GPU resources, summed
    gpu_node: bool = False  # a GPU resource appears in status.capacity or status.allocatable
    ready: bool = False  # the Ready condition is True
    ready_reported: bool = False  # a Ready condition is there at all (not for a metadata-only object, or before the kubelet's first status)
    unschedulable: bool = False  # spec.unschedulable (cordoned)
    taints: tuple[Taint, ...] = ()  # the scheduling taints (NoSchedule, NoExecute) only
    allocatable: Mapping[str, int] = field(default_factory=dict)  # every resource, in Kueue's units (shared)

    @property
    def hostname(self) -> str:
        """The ``kubernetes.io/hostname`` label value Kueue's assignments name (the name if unset)."""
        return self.labels.get(HOSTNAME_LABEL) or self.name

    def capacity_view(self) -> tuple[Any, ...]:
        """What the capacity of its domains depends on (equal views: nothing to recompute)."""
        return (self.gpus, self.gpu_node, self.ready, self.unschedulable, self.taints, self.allocatable)


def parse_node(obj: Any, gpu_resources: Sequence[str] = ("nvidia.com/gpu",)) -> Node:
    if not isinstance(obj, dict):
        raise ParseError(f"expected an object, got {type(obj).__name__}")
    p: Problems = []
    meta = as_dict(obj.get("metadata"), "metadata", p)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ParseError("Node without metadata.name")
    spec, status = as_dict(obj.get("spec"), "spec", p), as_dict(obj.get("status"), "status", p)
    allocatable = as_dict(status.get("allocatable"), "status.allocatable", p)
    capacity = as_dict(status.get("capacity"), "status.capacity", p)
    gpus, gpu_node = gpu_count(allocatable, capacity, gpu_resources, p)
    raw_taints = spec.get("taints")
    taints = scheduling_taints(parse_taints(raw_taints, "spec.taints", p)) if raw_taints is not None else ()
    # A GPU node carries 50-100 labels (cloud, GPU feature discovery, node feature discovery), most
    # of them the same on every node: interned, their keys and values are one string each for the
    # whole cluster, which takes a node's labels from 6.6 to 1.7 kB (bench/capacity.py).
    labels = interned_map(str_map(meta.get("labels"), "metadata.labels", p))
    ready = _ready(status.get("conditions"), p)
    return Node(
        _intern(name), labels, p, gpus=gpus, gpu_node=gpu_node,
        ready=ready is True, ready_reported=ready is not None,
        unschedulable=as_bool(spec.get("unschedulable"), "spec.unschedulable", p, False),
        taints=taints,
        # Kueue's placement counts every allocatable resource (tas_topology_tree.go addNode).
        allocatable=allocatable_resources(allocatable, gpu_resources, p),
    )


def gpu_count(allocatable: Mapping[str, Any], capacity: Mapping[str, Any], gpu_resources: Sequence[str],
              p: Problems) -> tuple[float, bool]:
    """The node's allocatable GPUs and whether it is a GPU node at all: one whose device plugin
    reports none allocatable (all unhealthy, or gone) still is, by its capacity."""
    gpus: float = 0
    gpu_node = False
    for res in gpu_resources:
        q = allocatable.get(res)
        if q is not None:
            gpu_node = True
            try:
                gpus += parse_quantity(q)
            except ValueError:
                p.append(f"status.allocatable: bad quantity for {res}: {q!r}")
        elif res in capacity:
            gpu_node = True
    return gpus, gpu_node


def allocatable_resources(raw: dict[str, Any], gpu_resources: Sequence[str], p: Problems) -> Mapping[str, int]:
    """Every allocatable resource in Kueue's units; a bad GPU quantity is already a problem above."""
    found: Problems = []
    out = resource_list(raw, "status.allocatable", found)
    p.extend(e for e in found if not any(e.endswith(f"for {r}: {raw.get(r)!r}") for r in gpu_resources))
    return out


def _ready(raw: Any, p: Problems) -> bool | None:
    """Whether the Ready condition is True (kueue pkg/util/tas IsNodeStatusConditionTrue, called at
    tas_nodes_cache.go:59-60): False or Unknown is not ready, and so, for Kueue, is no condition
    at all (None here: nothing says the node failed either)."""
    for i, c in enumerate(as_list(raw, "status.conditions", p)):
        c = c if c.__class__ is dict else as_dict(c, f"status.conditions[{i}]", p)
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return None
