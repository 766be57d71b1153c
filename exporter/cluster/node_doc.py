"""A Node decoded straight from JSON into a typed struct (msgspec), and its record.

A Node's JSON is mostly what gangscope never reads: its images, addresses, annotations, managed
fields and daemon endpoints are 10-30 kB a node on a real GPU cluster, and ``orjson.loads``
builds every one of those strings before :func:`parse_node` looks at the few fields it reads
(exporter/cluster/nodes.py says which, after Kueue's node cache). The struct here names only
those, so a Node LIST decodes without building the rest (exporter/kube/typed.py).

As for Workloads (exporter/cluster/workload_doc.py): a document that decodes has every field
of the type :func:`parse_node` takes as it is, and :func:`node_from_doc` builds the same record;
where that parser would report a problem (a GPU quantity that is no quantity, a taint without an
effect) it refuses, and the document is read by :func:`parse_node`. Node watch events are read
as dicts by :func:`parse_node` (Nodes keep no digest, exporter.cluster.store). tests/test_node_doc.py
asserts both paths give equal records for the Nodes real clusters printed and the benchmark
cluster's.

Field names follow k8s.io/api core/v1 types.go (Node, NodeSpec, NodeStatus).
"""

# No "from __future__ import annotations": msgspec reads the annotations at run time.
import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from ..fields import Problems, interned_map
from ..kube.typed import Unclean, read_typed
from ..taints import parse_taints, scheduling_taints
from .nodes import Node, allocatable_resources, gpu_count, parse_node

_intern = sys.intern


class _Struct(msgspec.Struct, rename="camel", frozen=True):
    """Fields named as the API's JSON (camelCase); unknown fields are skipped. Each subclass says
    ``frozen=True`` again, as msgspec would inherit it, so that type checkers know it too."""


class NodeMeta(_Struct, frozen=True):
    name: str = ""
    namespace: str = ""  # none (Nodes are cluster-scoped): the field every document has (exporter.kube.typed)
    labels: dict[str, str] = {}


class NodeSpec(_Struct, frozen=True):
    unschedulable: bool = False
    taints: list[dict[str, Any]] | None = None


class NodeCondition(_Struct, frozen=True):
    type: str = ""
    status: str = ""


class NodeStatus(_Struct, frozen=True):
    allocatable: dict[str, str] = {}
    capacity: dict[str, Any] = {}
    conditions: list[NodeCondition] = []


class NodeDoc(_Struct, frozen=True):
    metadata: NodeMeta = NodeMeta()
    spec: NodeSpec = NodeSpec()
    status: NodeStatus = NodeStatus()


def read_node(obj: Any, gpu_resources: Sequence[str]) -> Node:
    """The record of a Node given as a :class:`NodeDoc` (a LIST's) or as a dict (a watch event's)."""
    return read_typed(obj, NodeDoc, node_from_doc, parse_node, gpu_resources)


def node_from_doc(doc: NodeDoc, gpu_resources: Sequence[str]) -> Node:
    """The record :func:`parse_node` makes of the same object; raises :class:`Unclean` where that
    parser would report a problem, or raise (a Node without a name)."""
    p: Problems = []
    meta, spec, status = doc.metadata, doc.spec, doc.status
    if not meta.name:
        raise Unclean("metadata.name")
    allocatable = status.allocatable
    gpus, gpu_node = gpu_count(allocatable, status.capacity, gpu_resources, p)
    taints = scheduling_taints(parse_taints(spec.taints, "spec.taints", p)) if spec.taints is not None else ()
    ready = reported = False
    for c in status.conditions:
        if c.type == "Ready":
            ready, reported = c.status == "True", True
            break
    node = Node(_intern(meta.name), interned_map(meta.labels), p, gpus=gpus, gpu_node=gpu_node, ready=ready,
                ready_reported=reported, unschedulable=spec.unschedulable, taints=taints,
                allocatable=allocatable_resources(allocatable, gpu_resources, p))
    if p:
        raise Unclean(p[0])
    return node
