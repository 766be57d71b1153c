"""Pods of gangs, Kueue Workloads and job controllers: the live truth of who is bound and running.

A PodGroup's status lags (Coscheduling's phase, kubernetes-sigs/scheduler-plugins#446), stops
after the first scheduling decision (the native ``PodGroupInitiallyScheduled`` condition) or says
nothing at all (KAI's PodGroup has no phase since KAI-Scheduler b73c0fa1). The pods say it as it
is: which are bound to a node, running, ready. The collector watches only the pods the tables of
:mod:`exporter.kube.resources` select (``POD_RESOURCES``: Kueue's, the gang schedulers', JobSet's and
LeaderWorkerSet's), several watches whose results overlap: a pod is kept once, by uid, with the set
of sources that currently deliver it, and goes when the last of them deletes it.

Each pod is kept as a trimmed :class:`Pod` (namespace, name, uid, node, phase, ready, GPUs
requested, the gang it names, the Kueue Workload annotation, its controller owner, the job
controller group it belongs to, whether it is being deleted, its scheduling gates, why a bound
pod has not started, a DisruptionTarget reason); what those mean for a gang is judged in
:mod:`exporter.cluster.gang_state`; shared pieces (gang, owner, job references) are one object for
all pods that name them: 100,000 realistic pods take 135 MiB (``bench/pods.py``; target under 150).

How a pod names its gang, by API (first match wins):

* native: ``spec.schedulingGroup.podGroupName`` (1.36+, kubernetes/api v0.36.0
  core/v1/types.go:4499 and 4647; at 10b39a39 :4716, :4892), or the 1.35 ``spec.workloadRef``
  ``{name, podGroup}`` (v0.35.0 core/v1/types.go:4453, 4568-4592), named ``<workload>/<podGroup>``
  like the gang records of :func:`exporter.cluster.podgroups.parse_native_workload`;
* KAI: annotation ``pod-group-name`` (KAI-Scheduler d5bc503a pkg/common/constants/constants.go:54,
  read by the scheduler in pkg/scheduler/api/pod_info/pod_info.go:395-401; labels are inert, as
  the real cluster of tests/fixtures/gangs/real/kai-05 shows), sub-group by label
  ``kai.scheduler/subgroup-name`` (constants.go:79);
* Volcano: annotation ``scheduling.k8s.io/group-name``;
* Coscheduling: label ``scheduling.x-k8s.io/pod-group`` (scheduler-plugins 903da7df
  apis/scheduling/v1alpha1/types.go:112), legacy ``pod-group.scheduling.sigs.k8s.io``.

Use (the collector, snapshot, explain and issue 16's per-domain capacity)::

    pods = PodStore(gpu_resources=("nvidia.com/gpu",))
    pods.handlers()                      # {source: PodHandler} for every POD_RESOURCES source, and
                                         # "pods" for offline dumps (loader)
    pods.on_change.append(cb)            # cb(PodChanges): after each event or whole LIST, the gang,
                                         # Workload, owner, job and node keys whose pods changed
    pods.gpus_bound_on(node) -> float    # GPUs of bound, non-terminal pods on a node (by node name)
    pods.gpus_bound_by_node() -> Mapping[str, float]   # the same for every node with any (read-only)
    pods.listed -> bool                  # a pod source (or a dump's pods) listed: no pod now means none
    pods.of_gang(ns, api, name) / of_workload(ns, name) / of_owner(uid) / of_job(ns, kind, name)
    pods.covers(source) -> bool          # whether the pods of a PodGroup source are watched and listed
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import structlog

from ..fields import SHARED_LIMIT, ParseError, Problems, shared
from ..health import SourceHealth
from ..kube.resources import POD_RESOURCES, Resource
from .podgroups import (COSCHEDULING_LEGACY_PODGROUP_LABEL, COSCHEDULING_PODGROUP_LABEL, KAI_POD_GROUP_ANNOTATION,
                        VOLCANO_GROUP_ANNOTATION)
from .resources import pod_requests
from .workloads import pod_gpus

log = structlog.get_logger(__name__)

WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
# IsTAS (kueue ff69552e pkg/util/tas/tas.go:58-85; the keys: apis/kueue/v1beta2/topology_types.go:28-60):
# such a pod's usage is its Workload's assignment, every other bound pod is Kueue's non-TAS usage
# (pkg/controller/tas/pod_usage_controller.go:158-173).
TAS_ANNOTATIONS = ("kueue.x-k8s.io/podset-preferred-topology", "kueue.x-k8s.io/podset-required-topology",
                   "kueue.x-k8s.io/podset-slice-required-topology",
                   "kueue.x-k8s.io/podset-slice-required-topology-constraints",
                   "kueue.x-k8s.io/podset-unconstrained-topology")
_NO_REQUESTS: Mapping[str, int] = {}
COSCHEDULING_LABELS = (COSCHEDULING_PODGROUP_LABEL, COSCHEDULING_LEGACY_PODGROUP_LABEL)
VOLCANO_ANNOTATION = VOLCANO_GROUP_ANNOTATION
KAI_ANNOTATION = KAI_POD_GROUP_ANNOTATION
KAI_SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
KAI_GPU_FRACTION = "gpu-fraction"
KAI_GPU_FRACTION_DEVICES = "gpu-fraction-num-devices"
KAI_GPU_MEMORY = "gpu-memory"
# Volcano's task of a pod (volcano ed72c7c8 staging/src/volcano.sh/apis/pkg/apis/batch/v1alpha1/labels.go:21),
# which the scheduler reads per task against the PodGroup's minTaskMember (pkg/scheduler/api/job_info.go:124, 426).
VOLCANO_TASK_KEY = "volcano.sh/task-spec"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # jobset api/jobset/v1alpha2/jobset_types.go:24
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"  # jobset_types.go:25
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"  # lws api/leaderworkerset/v1/leaderworkerset_types.go:37
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"  # :41
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"  # :49, on leaders and workers (controller :799, pod_controller :414)
TERMINAL = ("Succeeded", "Failed")
# The pod phases of core/v1 (PodPending, PodRunning, PodSucceeded, PodFailed, PodUnknown); any other
# value is bad input: kept, counted at the handler, and judged "unknown" by the gang.
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
DUMP_SOURCE = "pods"  # the one handler of offline dumps (snapshot, explain --from-file)

# Which pod source's LIST proves that a PodGroup source's pods are all seen: every Coscheduling
# pod carries its label, every Volcano or KAI pod its scheduler's name. Native pods are seen only
# when another source selects them, so their absence proves nothing.
COVERING = {
    "podgroups_coscheduling": "pods_coscheduling",
    "podgroups_coscheduling_legacy": "pods_coscheduling_legacy",
    "podgroups_volcano": "pods_volcano",
    "podgroups_kai": "pods_kai",
}

GangRef = tuple[str, str, str]  # (api, PodGroup name, KAI sub-group, Volcano task, native replica key, or "")
Owner = tuple[str, str, str]  # (kind, name, uid) of the controller owner
JobRef = tuple[str, str, str, int]  # (kind, name, group index or "", group size or 0)

_shared: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_intern = sys.intern


def _share(t: tuple[Any, ...]) -> tuple[Any, ...]:
    """One tuple object for every equal reference (gangs, owners and jobs repeat across pods)."""
    return shared(_shared, t, t)


@dataclass(slots=True)
class Pod:
    """What the collector keeps of one pod."""

    namespace: str
    name: str
    uid: str
    node: str  # spec.nodeName; "" while not bound
    phase: str
    ready: bool  # the Ready condition is True
    gpus: float  # effective GPU request (pod_gpus)
    gang: GangRef | None
    workload: str  # annotation kueue.x-k8s.io/workload (Kueue with TopologyAwareScheduling), or ""
    owner: Owner | None
    job: JobRef | None  # a JobSet or LeaderWorkerSet (with the group index and size) the pod belongs to
    jobset_uid: str  # label jobset.sigs.k8s.io/jobset-uid: the JobSet a Kueue Workload may be owned by
    rv: int  # metadata.resourceVersion as a number (0 when not one): a late event of one watch never undoes a newer one
    terminating: bool = False  # metadata.deletionTimestamp is set: it still holds its node's GPUs, but leaves the gang
    gates: tuple[str, ...] = ()  # spec.schedulingGates[].name: the scheduler does not look at the pod until they go
    waiting: str = ""  # bound, a container not running: the first waiting one's reason (ImagePullBackOff, CrashLoopBackOff, ...)
    gpus_unknown: bool = False  # GPUs through DRA claims or KAI gpu-memory: held, but how many is not in the pod
    disrupted: str = ""  # the DisruptionTarget condition's reason while True (preemption, eviction, node drain)
    sources: int = 0  # bit set of the sources that currently deliver the pod
    rv_sources: int = 0  # of those, the ones that have handed over this resourceVersion (see PodHandler._parse)
    requests: Mapping[str, int] = field(default_factory=dict)  # effective requests, Kueue's units (shared)
    tas: bool = False  # a TAS pod (kueue pkg/util/tas/tas.go:58-85): Kueue counts it through its Workload

    @property
    def bound(self) -> bool:
        """On a node and not finished: it holds the node's resources."""
        return bool(self.node) and self.phase not in TERMINAL


def _map(value: Any, what: str) -> dict:
    if value is None:
        return {}
    if value.__class__ is not dict:
        raise ParseError(f"pod {what} is not an object")
    return value


def parse_pod(obj: Any, gpu_resources: Sequence[str]) -> Pod:
    """The trimmed record; raises :class:`ParseError` for an object that is not a pod's shape."""
    if obj.__class__ is not dict:
        raise ParseError("not an object")
    meta = obj.get("metadata")
    if meta.__class__ is not dict or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ParseError("pod without metadata.name")
    labels = _map(meta.get("labels"), "labels")
    annotations = _map(meta.get("annotations"), "annotations")
    spec = _map(obj.get("spec"), "spec")
    status = _map(obj.get("status"), "status")
    ns = meta.get("namespace") or ""
    uid = meta.get("uid") or ""
    if ns.__class__ is not str or uid.__class__ is not str:
        raise ParseError("pod namespace or uid is not a string")
    problems: Problems = []
    gpus = pod_gpus(spec, gpu_resources, problems) if spec else 0
    if problems:
        raise ParseError("; ".join(problems))
    gpus_unknown = False
    if not gpus:
        gpus, gpus_unknown = _shared_gpus(spec, annotations)
    node, phase = spec.get("nodeName") or "", status.get("phase") or "Pending"
    if node.__class__ is not str or phase.__class__ is not str:
        raise ParseError("pod spec.nodeName or status.phase is not a string")
    ready = False
    disrupted = ""
    conds = status.get("conditions")
    if conds.__class__ is list:
        for c in conds:
            if c.__class__ is not dict:
                continue
            ctype = c.get("type")
            if ctype == "Ready":
                ready = c.get("status") == "True"
            elif ctype == "DisruptionTarget" and c.get("status") == "True":
                # core/v1 DisruptionTarget: the pod is about to be terminated (preemption, eviction,
                # node drain or garbage collection), with the reason saying which.
                disrupted = _intern(_str(c.get("reason")) or "DisruptionTarget")
    rv = meta.get("resourceVersion")
    requests = pod_requests(spec, "spec", problems) if spec else _NO_REQUESTS
    deletion = meta.get("deletionTimestamp")
    if deletion is not None and deletion.__class__ is not str:
        raise ParseError("pod metadata.deletionTimestamp is not a string")
    return Pod(
        namespace=_intern(ns), name=meta["name"], uid=uid or f"{ns}/{meta['name']}", node=node, phase=_intern(phase),
        ready=ready, gpus=gpus, gang=_gang(spec, labels, annotations), workload=_value(annotations, WORKLOAD_ANNOTATION),
        owner=_owner(meta.get("ownerReferences")), job=_job(labels, annotations),
        jobset_uid=_value(labels, JOBSET_UID_LABEL), rv=int(rv) if rv.__class__ is str and rv.isdigit() else 0,
        requests=requests, tas=any(a in annotations for a in TAS_ANNOTATIONS),
        terminating=bool(deletion), gates=_gates(spec.get("schedulingGates")),
        waiting=_waiting(status) if node and phase in ("Pending", "Running") else "", disrupted=disrupted, gpus_unknown=gpus_unknown,
    )


def _shared_gpus(spec: dict, annotations: dict) -> tuple[float, bool]:
    """GPUs a pod holds without requesting a GPU resource: a KAI fraction (annotation
    ``gpu-fraction`` times ``gpu-fraction-num-devices``, KAI-Scheduler 72de64fc
    pkg/common/constants/constants.go:36-40), or, unknown in number, a KAI ``gpu-memory`` request or
    DRA ``spec.resourceClaims`` (the claim's devices are in the ResourceClaim, not the pod)."""
    fraction = _value(annotations, KAI_GPU_FRACTION)
    if fraction:
        try:
            share = float(fraction)
        except ValueError:
            raise ParseError(f"pod annotation {KAI_GPU_FRACTION}={fraction!r} is not a number") from None
        devices = _value(annotations, KAI_GPU_FRACTION_DEVICES)
        return share * (int(devices) if devices.isdigit() else 1), False
    if _value(annotations, KAI_GPU_MEMORY) or spec.get("resourceClaims"):
        return 0.0, True
    return 0.0, False


def _gates(raw: Any) -> tuple[str, ...]:
    """spec.schedulingGates names (one shared tuple per combination: a job's pods repeat it)."""
    if raw is None:
        return ()
    if raw.__class__ is not list:
        raise ParseError("pod spec.schedulingGates is not a list")
    names = []
    for g in raw:
        if g.__class__ is not dict or g.get("name").__class__ is not str or not g["name"]:
            raise ParseError("pod spec.schedulingGates entry without a name")
        names.append(_intern(g["name"]))
    return _share(tuple(names))


def _waiting(status: dict) -> str:
    """Why a bound pod has not started, or (Running) a container of it is not running (CrashLoopBackOff
    between restarts): the first waiting init container's reason, else the first
    waiting container's (the kubelet's words: ContainerCreating, ImagePullBackOff, ...); "" when
    the kubelet reported none yet. Malformed entries say nothing (the phase still tells)."""
    for key in ("initContainerStatuses", "containerStatuses"):
        statuses = status.get(key)
        if statuses.__class__ is not list:
            continue
        for cs in statuses:
            state = cs.get("state") if cs.__class__ is dict else None
            waiting = state.get("waiting") if state.__class__ is dict else None
            reason = waiting.get("reason") if waiting.__class__ is dict else None
            if reason.__class__ is str and reason:
                return _intern(reason)
    return ""


def _str(value: Any) -> str:
    if value is None:
        return ""
    if value.__class__ is not str:
        raise ParseError(f"pod label or annotation value {value!r} is not a string")
    return value


def _value(mapping: dict, key: str) -> str:
    """A label or annotation value ("" when absent); any other type than a string is a parse error."""
    value = mapping.get(key)
    return "" if value is None else _str(value)


def _gang(spec: dict, labels: dict, annotations: dict) -> GangRef | None:
    group = spec.get("schedulingGroup")
    if group is not None:
        name = _value(_map(group, "spec.schedulingGroup"), "podGroupName")
        if name:
            return _share(("native", name, ""))
    name = _value(annotations, KAI_ANNOTATION)
    if name:
        return _share(("kai", name, _value(labels, KAI_SUBGROUP_LABEL)))
    name = _value(annotations, VOLCANO_ANNOTATION)
    if name:
        task = _value(annotations, VOLCANO_TASK_KEY) or _value(labels, VOLCANO_TASK_KEY)
        return _share(("volcano", name, task))
    for key, api in zip(COSCHEDULING_LABELS, ("coscheduling", "coscheduling_legacy")):
        name = _value(labels, key)
        if name:  # the label of each Coscheduling group names a PodGroup of that group
            return _share((api, name, ""))
    ref = spec.get("workloadRef")
    if ref is not None:
        ref = _map(ref, "spec.workloadRef")
        workload, group_name = _value(ref, "name"), _value(ref, "podGroup")
        if workload and group_name:
            # 1.35 podGroupReplicaKey (v0.35.0 core/v1/types.go:4568-4592): pods of one pod group
            # with different keys are separate gangs of the same template.
            replica = _value(ref, "podGroupReplicaKey")
            return _share(("native", f"{workload}/{group_name}", replica))
    return None


def _owner(refs: Any) -> Owner | None:
    if refs.__class__ is not list:
        return None
    for ref in refs:
        if ref.__class__ is dict and ref.get("controller") and ref.get("uid"):
            return _share((_str(ref.get("kind")), _str(ref.get("name")), _str(ref["uid"])))
    return None


def _job(labels: dict, annotations: dict) -> JobRef | None:
    name = _value(labels, LWS_NAME_LABEL)
    if name:
        size = _value(annotations, LWS_SIZE_ANNOTATION)
        return _share(("LeaderWorkerSet", name, _value(labels, LWS_GROUP_LABEL),
                       int(size) if size.isdigit() else 0))
    name = _value(labels, JOBSET_NAME_LABEL)
    if name:
        return _share(("JobSet", name, "", 0))
    return None


@dataclass(slots=True)
class PodChanges:
    """Keys whose pods changed in one event or one LIST (what listeners re-evaluate)."""

    gangs: set[tuple[str, str, str]] = field(default_factory=set)  # (namespace, api, PodGroup name)
    workloads: set[tuple[str, str]] = field(default_factory=set)  # (namespace, Kueue Workload name)
    owners: set[str] = field(default_factory=set)  # controller owner uids and JobSet uids
    jobs: set[tuple[str, str, str]] = field(default_factory=set)  # (namespace, kind, name)
    nodes: set[str] = field(default_factory=set)  # nodes whose bound GPUs changed
    covered: set[str] = field(default_factory=set)  # pod sources that completed their first LIST

    def __bool__(self) -> bool:
        return bool(self.gangs or self.workloads or self.owners or self.jobs or self.nodes or self.covered)

    def note(self, p: Pod) -> None:
        ns = p.namespace
        if p.gang is not None:
            self.gangs.add((ns, p.gang[0], p.gang[1]))
        if p.workload:
            self.workloads.add((ns, p.workload))
        if p.owner is not None:
            self.owners.add(p.owner[2])
        if p.jobset_uid:
            self.owners.add(p.jobset_uid)
        if p.job is not None:
            self.jobs.add((ns, p.job[0], p.job[1]))


class PodStore:
    """Every watched pod once, by uid, with indexes by gang, Workload, owner, job and node."""

    def __init__(self, gpu_resources: Sequence[str] = ("nvidia.com/gpu",)) -> None:
        self.gpu_resources = tuple(gpu_resources)
        self.pods: dict[str, Pod] = {}
        self.on_change: list[Callable[[PodChanges], None]] = []
        sources = [r.source for r in POD_RESOURCES] + [DUMP_SOURCE]
        self._bits = {s: 1 << i for i, s in enumerate(sources)}
        self._handlers = {s: PodHandler(self, s) for s in sources}
        self._listed: set[str] = set()
        self._by_gang: dict[tuple[str, str, str], list[str]] = {}
        self._by_workload: dict[tuple[str, str], list[str]] = {}
        self._by_owner: dict[str, list[str]] = {}
        self._by_job: dict[tuple[str, str, str], list[str]] = {}
        self._node_gpus: dict[str, float] = {}
        # node -> requests of its bound non-TAS pods, and "pods": a node with one such pod (the
        # common case of GPU nodes) holds that pod's shared read-only map (:meth:`_one_pod`), one
        # with more its own dict (a dict per node was an eighth of the store, bench/pods.py)
        self._node_usage: dict[str, Mapping[str, int]] = {}
        self._one_pod_usage: dict[int, tuple[Mapping[str, int], Mapping[str, int]]] = {}
        self._pending: PodChanges | None = None  # collected during a LIST, announced at its end
        self._lists = 0

    def handlers(self) -> dict[str, PodHandler]:
        return dict(self._handlers)

    # ---- queries ----------------------------------------------------------------------------

    def gpus_bound_on(self, node: str) -> float:
        """GPUs requested by the bound, non-terminal watched pods on ``node`` (a node name)."""
        return self._node_gpus.get(node, 0.0)

    @property
    def listed(self) -> bool:
        """Whether a pod source completed its first LIST (or a dump brought pods): before it, no
        pod known means nothing."""
        return bool(self._listed)

    def non_tas_usage_on(self, node: str) -> Mapping[str, int]:
        """Requests (and a ``pods`` unit each) of the bound, non-terminal, non-TAS pods on a node
        that the collector watches: Kueue's non-TAS usage as far as these pods go."""
        return self._node_usage.get(node, _NO_REQUESTS)

    def gpus_bound_by_node(self) -> Mapping[str, float]:
        """Node name -> GPUs of its bound, non-terminal watched pods (nodes with none are absent)."""
        return MappingProxyType(self._node_gpus)

    def of_gang(self, namespace: str, api: str, name: str) -> list[Pod]:
        return self._of(self._by_gang.get((namespace, api, name)))

    def of_workload(self, namespace: str, name: str) -> list[Pod]:
        return self._of(self._by_workload.get((namespace, name)))

    def of_owner(self, uid: str) -> list[Pod]:
        """Pods whose controller owner, or whose JobSet, has this uid."""
        return self._of(self._by_owner.get(uid))

    def of_job(self, namespace: str, kind: str, name: str) -> list[Pod]:
        return self._of(self._by_job.get((namespace, kind, name)))

    def _of(self, uids: list[str] | None) -> list[Pod]:
        pods = self.pods
        return [pods[u] for u in uids] if uids else []

    def covers(self, podgroup_source: str) -> bool:
        """Whether every pod of that PodGroup source is watched and its watch has listed once
        (then no pods means none exist); a dump with pods covers every source."""
        if DUMP_SOURCE in self._listed:
            return True
        pod_source = COVERING.get(podgroup_source)
        return pod_source is not None and pod_source in self._listed

    # ---- changes ----------------------------------------------------------------------------

    def _index(self, p: Pod, add: bool, changes: PodChanges) -> None:
        self._index_keys(p, add)
        self._index_node(p, add, changes)
        changes.note(p)

    def _index_keys(self, p: Pod, add: bool) -> None:
        """The pod's uid in (or out of) the lists of its gang, Workload, owners and job."""
        uid, ns = p.uid, p.namespace
        keys: list[tuple[dict[Any, list[str]], Any]] = []
        if p.gang is not None:
            keys.append((self._by_gang, (ns, p.gang[0], p.gang[1])))
        if p.workload:
            keys.append((self._by_workload, (ns, p.workload)))
        if p.owner is not None:
            keys.append((self._by_owner, p.owner[2]))
        if p.jobset_uid:
            keys.append((self._by_owner, p.jobset_uid))
        if p.job is not None:
            keys.append((self._by_job, (ns, p.job[0], p.job[1])))
        # Lists, not sets: a gang's pods are a handful to a few thousand, and a list of 8 uids
        # takes a sixth of a set's memory (bench/pods.py); removal scans one gang's list.
        for index, key in keys:
            if add:
                members = index.get(key)
                if members is None:
                    index[key] = [uid]
                else:  # put() unindexes a pod's old state before it indexes the new: no duplicates
                    members.append(uid)
            else:
                members = index.get(key)
                if members is not None and uid in members:
                    members.remove(uid)
                    if not members:
                        del index[key]

    def _index_node(self, p: Pod, add: bool, changes: PodChanges) -> None:
        """The pod's GPUs and requests on (or off) its node's sums."""
        if p.bound and p.gpus:
            node_gpus = self._node_gpus
            left = node_gpus.get(p.node, 0.0) + (p.gpus if add else -p.gpus)
            if add or left > 1e-9:
                node_gpus[p.node] = left
            else:
                node_gpus.pop(p.node, None)
            changes.nodes.add(p.node)
        if p.bound and not p.tas:  # tas_non_tas_pod_cache.go:112-135: requests and one pod each
            node_usage = self._node_usage
            usage = node_usage.get(p.node)
            if usage is None and add:
                node_usage[p.node] = self._one_pod(p.requests)
            elif usage is not None and usage.__class__ is not dict and not add:
                del node_usage[p.node]  # its one pod left
            elif usage is not None:
                if usage.__class__ is not dict:
                    usage = node_usage[p.node] = dict(usage)
                sign = 1 if add else -1
                for k, v in p.requests.items():
                    usage[k] = usage.get(k, 0) + sign * v
                usage["pods"] = usage.get("pods", 0) + sign
                if usage["pods"] <= 0:
                    del node_usage[p.node]
            changes.nodes.add(p.node)

    def _one_pod(self, requests: Mapping[str, int]) -> Mapping[str, int]:
        """The usage of a node with one pod of these requests: one read-only map per distinct
        requests (they are shared, so their id names them while the entry holds them)."""
        entry = self._one_pod_usage.get(id(requests))
        if entry is None or entry[0] is not requests:
            if len(self._one_pod_usage) >= SHARED_LIMIT:
                self._one_pod_usage.clear()  # the nodes keep the maps they hold
            entry = self._one_pod_usage[id(requests)] = (requests, MappingProxyType({**requests, "pods": 1}))
        return entry[1]

    def _move(self, old: Pod, new: Pod, changes: PodChanges) -> None:
        """A new state of a kept pod: most status changes (bound -> running -> ready) leave its
        keys and its node's sums alone, and then only its keys are announced (a third of a pod
        event's cost was taking it out of its lists and putting it back)."""
        if not (new.gang is old.gang and new.workload == old.workload and new.owner is old.owner
                and new.jobset_uid == old.jobset_uid and new.job is old.job and new.namespace == old.namespace):
            self._index_keys(old, False)
            self._index_keys(new, True)
            changes.note(old)
        if not (new.bound == old.bound and new.node == old.node and new.gpus == old.gpus
                and new.requests is old.requests and new.tas == old.tas):
            self._index_node(old, False, changes)
            self._index_node(new, True, changes)
        changes.note(new)

    def put(self, source: str, p: Pod) -> None:
        bit = self._bits[source]
        old = self.pods.get(p.uid)
        changes = self._pending if self._pending is not None else PodChanges()
        if old is not None:
            p.sources = old.sources | bit
            if old.rv > p.rv and p.rv:  # a lagging watch's older state
                old.sources = p.sources
                return
            rv_sources = (old.rv_sources | bit) if old.rv == p.rv else bit
            if _same(old, p):
                old.sources, old.rv, old.rv_sources = p.sources, p.rv, rv_sources
                return
            p.rv_sources = rv_sources
            self.pods[p.uid] = p
            self._move(old, p, changes)
        else:
            p.sources = p.rv_sources = bit
            self.pods[p.uid] = p
            self._index(p, True, changes)
        if self._pending is None:
            self._announce(changes)

    def remove(self, source: str, uid: str) -> None:
        p = self.pods.get(uid)
        if p is None:
            return
        p.sources &= ~self._bits[source]
        if p.sources:
            return
        del self.pods[uid]
        changes = self._pending if self._pending is not None else PodChanges()
        self._index(p, False, changes)
        if self._pending is None:
            self._announce(changes)

    def begin_batch(self) -> None:
        if self._lists == 0:
            self._pending = PodChanges()
        self._lists += 1

    def end_batch(self) -> None:
        self._lists = max(0, self._lists - 1)
        if self._lists == 0 and self._pending is not None:
            changes, self._pending = self._pending, None
            self._announce(changes)

    def mark_listed(self, source: str) -> None:
        """The source's first complete LIST: from now on its pods are the evidence for the gangs
        it covers (:meth:`covers`), even those with no pod at all; listeners learn it in
        ``PodChanges.covered``."""
        if source in self._listed:
            return
        self._listed.add(source)
        changes = self._pending if self._pending is not None else PodChanges()
        changes.covered.add(source)
        if self._pending is None:
            self._announce(changes)

    def source_bit(self, source: str) -> int:
        """The bit of ``source`` in a pod's ``sources`` and ``rv_sources``."""
        return self._bits[source]

    def uids_from(self, source: str) -> Iterator[str]:
        bit = self._bits[source]
        return (uid for uid, p in self.pods.items() if p.sources & bit)

    def _announce(self, changes: PodChanges) -> None:
        if not changes:
            return
        for cb in self.on_change:
            try:
                cb(changes)
            except Exception:  # a listener's bug must not lose the pod store's state
                log.exception("pod_listener_failed")


def _same(a: Pod, b: Pod) -> bool:
    """Whether two states of a pod differ in nothing the collector keeps (most pod updates
    change fields it drops: statuses of containers, probes, IPs)."""
    return (a.node == b.node and a.phase == b.phase and a.ready == b.ready and a.gpus == b.gpus and a.gang is b.gang
            and a.workload == b.workload and a.owner is b.owner and a.job is b.job and a.jobset_uid == b.jobset_uid
            and a.name == b.name and a.namespace == b.namespace and a.requests is b.requests and a.tas == b.tas
            and a.terminating == b.terminating
            and a.gates == b.gates and a.waiting == b.waiting and a.disrupted == b.disrupted
            and a.gpus_unknown == b.gpus_unknown)


class PodHandler:
    """Informer handler of one pod source (paged LISTs, watch events); ``health`` counts
    malformed pods, which are skipped."""

    def __init__(self, store: PodStore, source: str) -> None:
        self.store, self.source = store, source
        self.health: SourceHealth | None = None
        self._seen: set[str] | None = None

    def replace(self, objects: Iterable[Any]) -> None:
        self.begin_replace()
        self.add_page(objects)
        self.end_replace(True)

    def begin_replace(self) -> None:
        self._seen = set()
        self.store.begin_batch()

    def add_page(self, objects: Iterable[Any]) -> None:
        if self._seen is None:
            raise RuntimeError("add_page outside begin_replace/end_replace")
        for obj in objects:
            p = self._parse(obj)
            if p is not None:
                self._seen.add(p.uid)
                self._guarded(self.store.put, self.source, p)

    def end_replace(self, complete: bool) -> None:
        seen, self._seen = self._seen, None
        store = self.store
        try:
            if complete and seen is not None:
                for uid in [u for u in store.uids_from(self.source) if u not in seen]:
                    self._guarded(store.remove, self.source, uid)
                store.mark_listed(self.source)
        finally:
            store.end_batch()

    def apply(self, event_type: str, obj: Any) -> None:
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        p = self._parse(obj)
        if p is None:
            return
        if event_type == "DELETED":
            self._guarded(self.store.remove, self.source, p.uid)
        else:
            self._guarded(self.store.put, self.source, p)

    def _parse(self, obj: Any) -> Pod | None:
        """The pod's record: the one the store holds when another watch already handed over this
        state of the pod (its uid at the same resourceVersion, which names one state of an object:
        a pod with the Coscheduling label is seen by two watches, and is parsed once), else a new one."""
        meta = obj.get("metadata") if obj.__class__ is dict else None
        if meta.__class__ is dict:
            uid, rv = meta.get("uid"), meta.get("resourceVersion")
            if isinstance(uid, str) and isinstance(rv, str) and rv.isdigit():
                known = self.store.pods.get(uid)
                if (known is not None and known.rv and known.rv == int(rv)
                        and not known.rv_sources & self.store.source_bit(self.source)):
                    return known
        try:
            p = parse_pod(obj, self.store.gpu_resources)
            if p.phase not in PHASES:  # kept (its node and GPUs are real), judged "unknown" by its gang
                log.warning("object_parse_problems", source=self.source, detail=f"unknown pod phase {p.phase!r}",
                            object=p.name)
                if self.health is not None:
                    self.health.parse_error()
            return p
        except ParseError as exc:
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            log.warning("object_parse_problems", source=self.source, detail=str(exc)[:300],
                        object=meta.get("name") if isinstance(meta, dict) else None)
            if self.health is not None:
                self.health.parse_error()
            return None

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # a bug must not stop the stream; counted as one, not as a bad pod
            log.exception("pod_handler_failed", source=self.source)
            if self.health is not None:
                self.health.internal_error()


def add_pod_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that choose which pods the collector watches (collector, snapshot, explain)."""
    p.add_argument("--no-pods", action="store_true",
                   help="do not watch pods: judge gangs from PodGroup status alone (counters, phase, conditions)")
    p.add_argument("--kai-scheduler-name", default="kai-scheduler", metavar="NAME",
                   help="spec.schedulerName of KAI Scheduler's pods, which are watched by it (default kai-scheduler)")
    p.add_argument("--volcano-scheduler-name", default="volcano", metavar="NAME",
                   help="spec.schedulerName of Volcano's pods, which are watched by it (default volcano)")


def pod_resources(args: argparse.Namespace) -> dict[str, Resource]:
    """The pod sources' resources with the scheduler names of the flags (source -> Resource)."""
    names = {"pods_kai": args.kai_scheduler_name, "pods_volcano": args.volcano_scheduler_name}
    out = {}
    for r in POD_RESOURCES:
        if r.source in names:
            r = dataclasses.replace(r, field_selector=f"spec.schedulerName={names[r.source]}")
        out[r.source] = r
    return out
