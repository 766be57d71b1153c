"""A Workload decoded straight from JSON into typed structs (msgspec), and its record.

The collector's first LIST of a large cluster is mostly spent turning JSON into records:
``orjson.loads`` builds a dict for every object and sub-object, and :func:`parse_workload`
then checks the type of every field it reads, in Python. A msgspec decoder typed with the
fields gangscope reads does both in C: fields it does not read are skipped without being
built, and a field of the wrong type fails the decode.

That strictness is what keeps this path exact: a document that decodes here has every field
it names of the type :func:`parse_workload` takes as it is, so :func:`workload_from_doc` can
build the same record without checks. A document that does not decode (a wrong type, a null
where Kueue writes an object) is decoded again as plain JSON and read by
:func:`parse_workload`, whose problems are counted: one bad object costs its own second
decode, never its page (``exporter.kube.typed``). tests/test_workload_doc.py asserts both
paths give equal records for every Workload of the fixtures printed by real clusters and of
the benchmark cluster.

The parts of a pod set's template (containers, tolerations, affinity) and of a topology
assignment that the parsers already read from dicts with their own caches stay dicts here
(``dict[str, Any]``), read by the same functions.

Field names and types follow kueue apis/kueue/v1beta2/workload_types.go (v1beta1 has the same
JSON names for every field read here, except the two spellings of the past execution time,
see :func:`exporter.cluster.workloads._past_execution`).
"""

# No "from __future__ import annotations": msgspec reads the annotations at run time.
import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from ..fields import Problems, interned_map, parse_time, str_map
from ..kube.typed import Unclean, read_typed
from ..taints import parse_tolerations
from .resources import pod_requests, required_affinity
from .workloads import (
    _EMPTY, TEMPLATE_ANNOTATION_KEYS, TEMPLATE_LABEL_KEYS, Condition, Owner, PodSet, Workload, _admission_checks,
    _assignments, _only, _scheduling_group, _shared_map, _topology_request, parse_workload, pod_gpus,
)

_intern = sys.intern


class _Struct(msgspec.Struct, rename="camel", frozen=True):
    """Fields named as the API's JSON (camelCase); unknown fields are skipped. Each subclass says
    ``frozen=True`` again, as msgspec would inherit it, so that type checkers know it too."""


class OwnerRef(_Struct, frozen=True):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class Meta(_Struct, frozen=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    creation_timestamp: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: list[OwnerRef] = []


class TemplateMeta(_Struct, frozen=True):
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class Template(_Struct, frozen=True):
    metadata: TemplateMeta = TemplateMeta()
    spec: dict[str, Any] = {}


class PodSetDoc(_Struct, frozen=True):
    name: str = "main"
    count: int = 1
    min_count: int | None = None
    topology_request: dict[str, Any] | None = None
    template: Template = Template()


class PriorityClassRef(_Struct, frozen=True):
    name: str = ""


class Spec(_Struct, frozen=True):
    queue_name: str = ""
    priority: int | None = None
    priority_class_ref: PriorityClassRef | None = None
    priority_class_name: str = ""
    active: bool = True
    pod_sets: list[PodSetDoc] = []


class ConditionDoc(_Struct, frozen=True):
    type: str
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""


class RequeueState(_Struct, frozen=True):
    count: int | None = None
    requeue_at: str = ""


class Admission(_Struct, frozen=True):
    cluster_queue: str = ""
    pod_set_assignments: list[dict[str, Any]] = []


class Eviction(_Struct, frozen=True):
    reason: str = ""
    underlying_cause: str = ""
    count: int = 0


class SchedulingStats(_Struct, frozen=True):
    evictions: list[Eviction] = []


class NodeRef(_Struct, frozen=True):
    name: str = ""


class Status(_Struct, frozen=True):
    conditions: list[ConditionDoc] = []
    requeue_state: RequeueState | None = None
    admission: Admission | None = None
    unhealthy_nodes: list[NodeRef] = []
    scheduling_stats: SchedulingStats | None = None
    admission_checks: list[dict[str, Any]] = []
    nominated_cluster_names: list[str] = []
    cluster_name: str = ""
    accumulated_past_execution_time_seconds: int | None = None
    accumulated_past_exexcution_time_seconds: int | None = None


class WorkloadDoc(_Struct, frozen=True):
    api_version: str = ""
    metadata: Meta = Meta()
    spec: Spec = Spec()
    status: Status = Status()




def as_doc(obj: Any) -> Any:
    """A watch event's Workload (a dict) as a :class:`WorkloadDoc`, or the dict itself where a
    field has another type (:func:`read_workload` then reads it with :func:`parse_workload`).
    Every event goes through the same typed path as the LIST's objects, so both are read, and
    their digests (exporter.cluster.unchanged) taken, alike."""
    if obj.__class__ is not dict:
        return obj
    try:
        return msgspec.convert(obj, WorkloadDoc)
    except msgspec.ValidationError:
        return obj


def read_workload(obj: Any, gpu_resources: Sequence[str]) -> Workload:
    """The record of a Workload given as a :class:`WorkloadDoc` or as a dict."""
    return read_typed(obj, WorkloadDoc, workload_from_doc, parse_workload, gpu_resources)


def workload_from_doc(doc: WorkloadDoc, gpu_resources: Sequence[str]) -> Workload:
    """The record :func:`parse_workload` makes of the same object, without its type checks (the
    decoder made them); raises :class:`Unclean` where that parser would report a problem."""
    p: Problems = []
    meta, spec, status = doc.metadata, doc.spec, doc.status
    if not meta.name or not meta.namespace:
        raise Unclean("metadata.name and metadata.namespace")
    owner = None
    for ref in meta.owner_references:
        if ref.controller is True:
            owner = Owner(_intern(ref.api_version), _intern(ref.kind), _intern(ref.name), _intern(ref.uid))
            break
    # v1beta2 spec.priorityClassRef.name, v1beta1 spec.priorityClassName
    priority_class = spec.priority_class_ref.name if spec.priority_class_ref is not None else ""
    conditions = {}
    for c in status.conditions:
        if not c.type:
            raise Unclean("status.conditions[].type")
        ctype, ltt = _intern(c.type), c.last_transition_time
        conditions[ctype] = Condition(ctype, _intern(c.status), _intern(c.reason), _intern(c.message), _intern(ltt),
                                      _seconds(ltt))
    requeue, admission, stats = status.requeue_state, status.admission, status.scheduling_stats
    requeue_at = requeue.requeue_at if requeue is not None else ""
    evictions: dict[tuple[str, str], int] = {}
    if stats is not None:
        for e in stats.evictions:
            key = (e.reason, e.underlying_cause)
            evictions[key] = evictions.get(key, 0) + e.count
    past = status.accumulated_past_execution_time_seconds
    created = meta.creation_timestamp
    wl = Workload(
        namespace=_intern(meta.namespace),
        name=meta.name,
        uid=meta.uid,
        api_version=_intern(doc.api_version),
        labels=interned_map(meta.labels),
        owner=owner,
        queue_name=_intern(spec.queue_name),
        priority_class=_intern(priority_class or spec.priority_class_name),
        priority=spec.priority,
        active=spec.active,
        created=_intern(created),
        created_seconds=_seconds(created),
        conditions=conditions,
        requeue_count=requeue.count if requeue is not None else None,
        requeue_at=requeue_at,
        requeue_at_seconds=_seconds(requeue_at),
        evictions=evictions,
        admission_checks=_admission_checks(status.admission_checks, p) if status.admission_checks else (),
        podsets=_podsets(spec.pod_sets, gpu_resources, p, admission is None),
        admitted=admission is not None,
        admission_cluster_queue=_intern(admission.cluster_queue) if admission is not None else "",
        assignments=_assignments(admission.pod_set_assignments, p) if admission is not None else (),
        unhealthy_nodes=tuple(n.name for n in status.unhealthy_nodes if n.name),
        problems=(),
        past_execution_seconds=past if past is not None else status.accumulated_past_exexcution_time_seconds,
        worker_cluster=_intern(status.cluster_name),
        nominated_clusters=tuple(map(_intern, status.nominated_cluster_names)),
        replaces_slice="kueue.x-k8s.io/workload-slice-replacement-for" in meta.annotations,
    )
    if p:
        raise Unclean(p[0])
    return wl


def _seconds(value: str) -> float | None:
    if not value:
        return None
    seconds = parse_time(value)
    if seconds is None:
        raise Unclean(f"not an RFC 3339 time: {value!r}")
    return seconds


def _podsets(docs: list[PodSetDoc], gpu_resources: Sequence[str], p: Problems, placing: bool) -> tuple[PodSet, ...]:
    """As :func:`exporter.cluster.workloads._podsets`: the template's spec is a dict, read by the
    same functions (with their caches); ``placing``: tolerations, selector and affinity too."""
    out = []
    for i, ps in enumerate(docs):
        spec, tmeta = ps.template.spec, ps.template.metadata
        w = f"spec.podSets[{i}]"
        tolerations, selector = (spec.get("tolerations"), spec.get("nodeSelector")) if placing else (None, None)
        out.append(PodSet(
            name=_intern(ps.name) if ps.name else "main",
            count=ps.count,
            gpus_per_pod=pod_gpus(spec, gpu_resources, p, w + ".template.spec"),
            labels=_shared_map(_only(tmeta.labels, TEMPLATE_LABEL_KEYS)),
            annotations=_shared_map(_only(tmeta.annotations, TEMPLATE_ANNOTATION_KEYS)),
            scheduling_group=_scheduling_group(spec.get("schedulingGroup"), w, p),
            topology=_topology_request(ps.topology_request, w, p),
            tolerations=parse_tolerations(tolerations, w + ".template.spec.tolerations", p) if tolerations is not None else (),
            node_selector=_shared_map(str_map(selector, w + ".template.spec.nodeSelector", p)) if selector is not None else _EMPTY,
            requests=pod_requests(spec, w + ".template.spec", p),
            affinity=required_affinity(spec, w + ".template.spec", p) if placing else None,
            min_count=ps.min_count,
        ))
    return tuple(out)
