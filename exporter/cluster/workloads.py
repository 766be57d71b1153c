"""Kueue Workloads: the typed record, its metric families and their lines.

One module follows a Workload from the decoded JSON (either API version) to its exposition
lines: :func:`parse_workload` builds a :class:`Workload` record and :func:`render_workload`
turns it into sample lines for the families declared below. What the conditions mean (the
stage, why it waits) is :mod:`.workload_state`'s, which the store sets on the record as
``state`` before rendering; topology labels come from the store too (``placed`` domains and a
label fragment per path), because they depend on Node labels, Topologies, ResourceFlavors and
gangs that change on their own.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..exposition import Family, LabelPairs, label_pairs
from ..fields import (
    SHARED_LIMIT, ParseError, Problems, as_bool, as_dict, as_int, as_list, as_str, interned_map, parse_quantity, parse_time,
    require_identity, shared, str_map,
)
from ..taints import Toleration, parse_tolerations
from ..topologies import FlavorTopology
from ..topology import AssignmentError, Domain, iter_domains
from .podgroups import (COSCHEDULING_LEGACY_PODGROUP_LABEL, COSCHEDULING_PODGROUP_LABEL, KAI_POD_GROUP_ANNOTATION,
                        VOLCANO_GROUP_ANNOTATION)
from .resources import pod_requests, required_affinity
from .tas_fit import SelectorTerm

# The stages a Workload's status means, highest precedence first: the first stage whose rule holds
# is the Workload's stage (the rules: exporter.cluster.workload_state, which judges; the record
# holds the result, so the vocabulary lives here and that module reads this one).
STAGES = (
    "finished", "deactivated", "evicting", "recovering", "running", "assembling", "admission_checks",
    "preempting", "backoff", "held", "inadmissible", "queued",
)
# Admission check states (kueue apis/kueue/v1beta2/workload_types.go:803-805).
CHECK_STATES = ("Pending", "Ready", "Retry", "Rejected")

_NW = ("namespace", "workload")
# Stages whose Workload keeps a summary only (past --finished-detail): its placement, gang and
# PodGroup series go, as a finished job's hosts and members mean nothing any more.
RETIRED_STAGES = ("finished", "deactivated")
_EMPTY: dict = {}  # an absent object, read-only

WORKLOAD_INFO = Family(
    "gangscope_workload_info", "info",
    "Kueue Workload identity: its queues, priority class and controller owner; with MultiKueue, the worker cluster "
    "it was dispatched to (status.clusterName) or, until then, the clusters nominated (status.nominatedClusterNames, "
    "comma-separated).",
    (*_NW, "cluster_queue", "local_queue", "priority_class", "owner_kind", "owner_name", "worker_cluster",
     "nominated_worker_clusters"),
)
WORKLOAD_STAGE = Family(
    "gangscope_workload_stage", "gauge",
    "Pipeline stage of the Workload: one series, value 1, labelled with the current stage (count by (stage) for how many "
    "are in each).", (*_NW, "stage"),
)
WORKLOAD_PENDING_REASON = Family(
    "gangscope_workload_pending_reason", "gauge",
    "1 while the Workload is not admitted: Kueue's reason and what it means (category capacity, configuration, "
    "preemption, policy, backoff, evaluation or admission_check).",
    (*_NW, "reason", "category"),
)
WORKLOAD_CONDITION = Family(
    "gangscope_workload_condition", "gauge",
    "One series per Workload status condition, with its status and reason.", (*_NW, "type", "status", "reason"),
)
WORKLOAD_CREATED = Family(
    "gangscope_workload_created_timestamp_seconds", "gauge", "When the Workload object was created.", _NW,
)
WORKLOAD_QUOTA_RESERVED = Family(
    "gangscope_workload_quota_reserved_timestamp_seconds", "gauge",
    "When the QuotaReserved condition last became True (absent while not True).", _NW,
)
WORKLOAD_ADMITTED = Family(
    "gangscope_workload_admitted_timestamp_seconds", "gauge",
    "When the Admitted condition last became True (absent while not True).", _NW,
)
WORKLOAD_PODS_READY = Family(
    "gangscope_workload_pods_ready_timestamp_seconds", "gauge",
    "When the PodsReady condition last became True (absent while not True).", _NW,
)
WORKLOAD_FINISHED = Family(
    "gangscope_workload_finished_timestamp_seconds", "gauge",
    "When the Finished condition became True (absent while not True): with the admitted timestamp and "
    "gangscope_workload_past_execution_seconds, the Workload's execution time.", _NW,
)
WORKLOAD_EVICTIONS = Family(
    "gangscope_workload_evictions_total", "counter",
    "Evictions of the Workload by reason and underlying cause, from status.schedulingStats.",
    (*_NW, "reason", "underlying_cause"),
)
WORKLOAD_REQUEUE_COUNT = Family(
    "gangscope_workload_requeues", "gauge",
    "Times Kueue requeued the Workload after an eviction with backoff (status.requeueState.count; reset on reactivation).", _NW,
)
WORKLOAD_REQUEUE_AT = Family(
    "gangscope_workload_requeue_at_timestamp_seconds", "gauge",
    "When Kueue will requeue the Workload after its backoff (status.requeueState.requeueAt).", _NW,
)
WORKLOAD_ADMISSION_CHECK = Family(
    "gangscope_workload_admission_check", "gauge",
    "State of each admission check of the Workload: one series per check, value 1, labelled with its current state "
    "(Pending, Ready, Retry or Rejected).",
    (*_NW, "check", "state"),
)
WORKLOAD_ADMISSION_CHECK_TRANSITION = Family(
    "gangscope_workload_admission_check_transition_timestamp_seconds", "gauge",
    "When the admission check last changed state (its lastTransitionTime).", (*_NW, "check"),
)
WORKLOAD_REQUESTED_GPUS = Family(
    "gangscope_workload_requested_gpus", "gauge",
    "GPUs the Workload requests: pod count times GPUs per pod, summed over pod sets.", _NW,
)
WORKLOAD_TOPOLOGY_PODS = Family(
    "gangscope_workload_topology_pods", "gauge",
    "Pods assigned per lowest-level topology domain, from the current or last topology assignment.",
    (*_NW, "podset"), topology=True,
)
WORKLOAD_UNHEALTHY_NODE = Family(
    "gangscope_workload_unhealthy_node", "gauge",
    "Nodes Kueue lists in status.unhealthyNodes of the Workload (1 per node).", _NW, topology=True,
)
WORKLOAD_TOPOLOGY_REQUEST = Family(
    "gangscope_workload_topology_request", "gauge",
    "The topology request of each pod set (spec.podSets[].topologyRequest): mode required, preferred or unconstrained "
    "with the level's label name (value 1), and slice_required per slice layer with the pods per slice as the value.",
    (*_NW, "podset", "mode", "level"),
)
WORKLOAD_DOMAINS_SPANNED = Family(
    "gangscope_workload_domains_spanned", "gauge",
    "Topology domains of each level above the host that the admitted pod set's pods occupy.", (*_NW, "podset", "level"),
)
WORKLOAD_LOCALITY_RATIO = Family(
    "gangscope_workload_locality_ratio", "gauge",
    "The largest share of the admitted pod set's pods in one domain of the level (1: all in one).", (*_NW, "podset", "level"),
)
WORKLOAD_PAST_EXECUTION = Family(
    "gangscope_workload_past_execution_seconds", "gauge",
    "Seconds the Workload was admitted in earlier admit-evict cycles (Kueue's status.accumulatedPastExecutionTimeSeconds): "
    "the run time that evictions interrupted; add the current run from gangscope_workload_admitted_timestamp_seconds.",
    _NW,
)
TOPOLOGY_EVICTIONS = Family(
    "gangscope_topology_evictions_total", "counter",
    "Workload evictions observed since start (status.schedulingStats), counted once per domain at --eviction-level "
    "(labels of that level and above) of the placement the Workload was evicted from; NodeFailures only in the domains "
    "of the failed nodes (every domain of the placement where no failed node is known).",
    ("reason", "underlying_cause"), topology=True,
)

# Registration (and so exposition) order.
FAMILIES = (
    WORKLOAD_INFO, WORKLOAD_STAGE, WORKLOAD_PENDING_REASON, WORKLOAD_CONDITION, WORKLOAD_CREATED,
    WORKLOAD_QUOTA_RESERVED, WORKLOAD_ADMITTED, WORKLOAD_PODS_READY, WORKLOAD_FINISHED, WORKLOAD_EVICTIONS, WORKLOAD_REQUEUE_COUNT,
    WORKLOAD_REQUEUE_AT, WORKLOAD_ADMISSION_CHECK, WORKLOAD_ADMISSION_CHECK_TRANSITION, WORKLOAD_REQUESTED_GPUS,
    WORKLOAD_TOPOLOGY_PODS, WORKLOAD_UNHEALTHY_NODE, TOPOLOGY_EVICTIONS, WORKLOAD_TOPOLOGY_REQUEST,
    WORKLOAD_DOMAINS_SPANNED, WORKLOAD_LOCALITY_RATIO, WORKLOAD_PAST_EXECUTION,
)

# Condition types whose True transition time is exported as a timestamp family.
_TIMESTAMPS = (("QuotaReserved", WORKLOAD_QUOTA_RESERVED), ("Admitted", WORKLOAD_ADMITTED), ("PodsReady", WORKLOAD_PODS_READY),
               ("Finished", WORKLOAD_FINISHED))

Path = tuple[tuple[str, str], ...]  # ((alias, value), ...) over the configured topology levels

# Records share the immutable pieces that repeat across Workloads: one Domain per (host, pods),
# whichever Workloads held that host, and one dict per equal string map (flavors, templates).
# On a realistic cluster (bench/cluster.py, bench/caches.py) they save 15 and 5 MiB; caches of
# whole conditions and whole assignments saved nothing there (every Workload has its own times,
# messages and hosts) and held memory, so there are none. Nothing mutates a parsed record. The
# caches start over when they grow past SHARED_LIMIT, like the time cache in .fields, so host
# churn cannot grow them forever.
_DOMAINS: dict[int, dict[str, Domain]] = {}  # pods -> host value -> Domain((host,), pods)
_MAPS: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}  # flavors, pod template labels and annotations
# The pod template's labels and annotations that name its gang, the only ones read
# (gang_state.template_refs): a job's other template labels are its own (its name, its uid), and
# kept they were 8 MiB for the benchmark cluster's 20,000 Workloads.
TEMPLATE_LABEL_KEYS = (COSCHEDULING_PODGROUP_LABEL, COSCHEDULING_LEGACY_PODGROUP_LABEL)
TEMPLATE_ANNOTATION_KEYS = (VOLCANO_GROUP_ANNOTATION, KAI_POD_GROUP_ANNOTATION)
_intern = sys.intern


def _only(d: dict[str, str], keys: tuple[str, ...]) -> dict[str, str]:
    """The entries of ``d`` under ``keys`` (a string map, checked whole first: its problems are counted)."""
    return {k: d[k] for k in keys if k in d} if d else d


def _shared_map(d: dict[str, str]) -> dict[str, str]:
    """One dict object for every equal string map (read-only by convention, like every record),
    and the one empty dict for every empty map."""
    return shared(_MAPS, tuple(d.items()), d) if d else _EMPTY


@dataclass(slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition: str  # as written by the API server (RFC 3339)
    last_transition_seconds: float | None


@dataclass(slots=True)
class AdmissionCheck:
    """``status.admissionChecks[]``: one check's state, message and retry bookkeeping."""

    name: str
    state: str  # Pending, Ready, Retry, Rejected (workload_types.go:803-805)
    message: str
    last_transition_seconds: float | None
    requeue_after_seconds: int | None  # set by the check's controller with Retry
    retry_count: int | None  # incremented by Kueue on every Retry

    @property
    def next_retry_seconds(self) -> float | None:
        """When Kueue retries a check in Retry: lastTransitionTime + requeueAfterSeconds
        (workload_types.go:817-828; pkg/workload/admissionchecks.go GetMaxRetryTime)."""
        if self.state != "Retry" or self.requeue_after_seconds is None or self.last_transition_seconds is None:
            return None
        return self.last_transition_seconds + self.requeue_after_seconds


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a Workload is not admitted: Kueue's reason token, its category and Kueue's message.

    ``reason`` is the token Kueue wrote (``QuotaReserved``'s reason, ``Admitted``'s while checks
    are pending, the ``Requeued`` reason during a backoff); an absent ``QuotaReserved`` counts as
    ``PendingEvaluation`` and an absent ``Admitted`` with quota reserved as
    ``UnsatisfiedAdmissionChecks``, as Kueue's own unadmitted-workloads metric counts them
    (KEP-10852, "Handling of Missing or Unset Status Conditions"); a backoff without a
    ``Requeued=False`` condition (an admission check's retry delay) says ``Backoff``.
    """

    reason: str
    category: str
    message: str


@dataclass(frozen=True, slots=True)
class WorkloadState:
    """The meaning of one Workload's status at one instant
    (:func:`exporter.cluster.workload_state.workload_state` computes it)."""

    stage: str
    pending: PendingReason | None  # None once admitted (or finished)
    backoff_until: float | None  # requeueState.requeueAt while it is in the future
    blocking_check: AdmissionCheck | None  # the admission check that holds admission, if any
    pods_assembling: bool | None  # the gang signal this state was computed with
    uses_pods_signal: bool = False  # whether the stage depends on it (admitted, no PodsReady)


@dataclass(slots=True)
class Owner:
    """The controller ownerReference (usually the Job, JobSet, RayJob ...)."""

    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """``spec.podSets[].topologyRequest`` (apis/kueue/v1beta2/workload_types.go:165-251; v1beta1
    has the same fields but the slice constraints list), as the node label keys Kueue names.

    ``slices`` are the slice layers outermost first, (level key, pods per slice): the
    ``podsetSliceRequiredTopologyConstraints`` list, else ``podSetSliceRequiredTopology`` with
    ``podSetSliceSize`` (0 when unset), as Kueue reads them (pkg/util/tas/tas.go:141-158).
    """

    required: str = ""
    preferred: str = ""
    unconstrained: bool = False
    slices: tuple[tuple[str, int], ...] = ()
    group: str = ""  # podSetGroupName: pod sets placed together

    @property
    def mode(self) -> str:
        """required, preferred or unconstrained (Kueue's precedence, tas_flavor_snapshot.go:1222-1238);
        "" for a request that names only slices or nothing Kueue places by."""
        if self.required:
            return "required"
        if self.preferred:
            return "preferred"
        if self.unconstrained:
            return "unconstrained"
        return ""

    @property
    def level(self) -> str:
        """The level the pod set asks to be kept in (required or preferred), "" for none."""
        return self.required or self.preferred


@dataclass(slots=True)
class PodSet:
    """``spec.podSets[]``: what the gang needs, and the template metadata the PodGroup join reads."""

    name: str
    count: int
    gpus_per_pod: float
    labels: dict[str, str]
    annotations: dict[str, str]
    scheduling_group: str = ""  # template.spec.schedulingGroup.podGroupName: the native PodGroup (1.36+)
    topology: TopologyRequest | None = None
    tolerations: tuple[Toleration, ...] = ()  # template.spec.tolerations
    node_selector: dict[str, str] = field(default_factory=dict)  # template.spec.nodeSelector
    requests: Mapping[str, int] = field(default_factory=dict)  # one pod's effective requests, Kueue's units (shared)
    affinity: tuple[SelectorTerm, ...] | None = None  # template's required node affinity terms (waiting only)
    min_count: int | None = None  # minCount: Kueue may admit fewer pods (partial admission)


class Shape:
    """The identity of a parsed hostname assignment (see :class:`Assignment`): it hashes in O(1)
    however many hosts it stands for (a Workload may have 100,000), so the store indexes the
    assignment's hosts under it once."""

    __slots__ = ()


@dataclass(slots=True)
class Assignment:
    """``status.admission.podSetAssignments[]`` with its topology domains.

    ``domains`` are the expanded domains as Kueue stores them (often only the hostname level);
    ``placed`` is filled by the store: one ``(full path, pods)`` per domain, upper levels taken
    from Node labels for the levels of the flavor's own Topology (``topology``). ``shape``
    identifies the hostname assignment the domains came from (``None`` for other forms).
    """

    name: str
    count: int | None
    flavors: dict[str, str]
    levels: tuple[str, ...]
    domains: tuple[Domain, ...]
    shape: Shape | None = None
    placed: Sequence[tuple[Path, int]] = ()
    topology: FlavorTopology | None = None  # the flavor's Topology the store expanded it with


@dataclass(slots=True)
class Workload:
    """Everything gangscope reads from one Workload (fields named after the API)."""

    namespace: str
    name: str
    uid: str
    api_version: str
    labels: dict[str, str]
    owner: Owner | None
    queue_name: str
    priority_class: str
    priority: int | None
    active: bool
    created: str
    created_seconds: float | None
    conditions: dict[str, Condition]
    requeue_count: int | None
    requeue_at: str
    requeue_at_seconds: float | None
    evictions: dict[tuple[str, str], int]  # (reason, underlyingCause) -> count
    admission_checks: tuple[AdmissionCheck, ...]
    podsets: tuple[PodSet, ...]
    admitted: bool  # status.admission present
    admission_cluster_queue: str
    assignments: tuple[Assignment, ...]  # current admission (empty when none)
    unhealthy_nodes: tuple[str, ...]
    # Tuples: an empty one is the one empty tuple; empty lists here and below were 4 MiB of the
    # benchmark cluster's 20,000 Workloads.
    problems: tuple[str, ...]
    past_execution_seconds: int | None = None  # status.accumulatedPastExecutionTimeSeconds
    # MultiKueue (kueue apis/kueue/v1beta2/workload_types.go:697-708, v1beta1 :433-443, same JSON names):
    # status.clusterName, the worker cluster the Workload was dispatched to (reset on eviction), and
    # status.nominatedClusterNames, the candidates until then (mutually exclusive with it, a CEL
    # rule of the CRD at :616; set by pkg/controller/admissionchecks/multikueue/workload.go:880,917).
    worker_cluster: str = ""
    nominated_clusters: tuple[str, ...] = ()
    # Annotation kueue.x-k8s.io/workload-slice-replacement-for (pkg/workloadslicing): a new slice of an
    # elastic Workload, which the topology fit does not model.
    replaces_slice: bool = False
    # Filled by the store:
    state: WorkloadState | None = None  # what the status means (exporter.cluster.workload_state)
    cluster_queue: str = ""  # admission's, else the LocalQueue's spec.clusterQueue
    last_assignments: tuple[Assignment, ...] = ()  # current, else the last seen with topology
    unhealthy_paths: tuple[Path, ...] = ()
    failed_nodes: tuple[str, ...] = ()  # the nodes of its last NodeFailures eviction (exporter.cluster.evictions)
    detail: bool = True  # False: finished or deactivated past --finished-detail, its summary only
    # (namespace, name), made once: the store's indexes hold it for each of a Workload's hosts,
    # queues and owners, and a tuple made per lookup was 110,000 tuples (6 MiB) on the benchmark cluster.
    key: tuple[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = (self.namespace, self.name)

    @property
    def stage(self) -> str:
        """The stage the store last computed ("" before the store has seen the record)."""
        return self.state.stage if self.state is not None else ""

    def condition_true(self, ctype: str) -> bool:
        c = self.conditions.get(ctype)
        return c is not None and c.status == "True"

    @property
    def has_topology(self) -> bool:
        return any(a.domains for a in self.assignments)


def parse_workload(obj: Any, gpu_resources: Sequence[str] = ("nvidia.com/gpu",)) -> Workload:
    """Decode a Workload of either API version; problems in single fields land in ``problems``.

    Raises :class:`ParseError` only when the object has no usable namespace/name.
    """
    if not isinstance(obj, dict):
        raise ParseError(f"expected an object, got {type(obj).__name__}")
    p: Problems = []
    # Fields of the expected type are taken as they are (the common case, on every event);
    # the tolerant accessors of .fields handle the rest and note the problem.
    meta, spec, status = obj.get("metadata"), obj.get("spec"), obj.get("status")
    if meta.__class__ is not dict:
        meta = as_dict(meta, "metadata", p)
    name, namespace = require_identity("Workload", meta)
    if spec.__class__ is not dict:
        spec = as_dict(spec, "spec", p)
    if status.__class__ is not dict:
        status = as_dict(status, "status", p)

    owner = None
    for i, ref in enumerate(as_list(meta.get("ownerReferences"), "metadata.ownerReferences", p)):
        if isinstance(ref, dict) and ref.get("controller") is True:
            w = f"metadata.ownerReferences[{i}]"
            owner = Owner(_intern(as_str(ref.get("apiVersion"), w, p)), _intern(as_str(ref.get("kind"), w, p)),
                          _intern(as_str(ref.get("name"), w, p)), _intern(as_str(ref.get("uid"), w, p)))
            break

    # v1beta2 spec.priorityClassRef.name, v1beta1 spec.priorityClassName
    priority_class = as_str(as_dict(spec.get("priorityClassRef"), "spec.priorityClassRef", p).get("name"),
                            "spec.priorityClassRef.name", p)
    if not priority_class:
        priority_class = as_str(spec.get("priorityClassName"), "spec.priorityClassName", p)

    created = meta.get("creationTimestamp")
    if created.__class__ is not str:
        created = as_str(created, "metadata.creationTimestamp", p)
    conditions = _conditions(status.get("conditions"), p)
    requeue = status.get("requeueState")
    requeue = _EMPTY if requeue is None else as_dict(requeue, "status.requeueState", p)
    requeue_at = as_str(requeue.get("requeueAt"), "status.requeueState.requeueAt", p)
    admission = status.get("admission")
    admission_d = admission if admission.__class__ is dict else as_dict(admission, "status.admission", p)
    assignments = _assignments(admission_d.get("podSetAssignments"), p)
    unhealthy = []
    raw_unhealthy = status.get("unhealthyNodes")
    if raw_unhealthy is not None:
        for i, n in enumerate(as_list(raw_unhealthy, "status.unhealthyNodes", p)):
            node = as_str(as_dict(n, f"status.unhealthyNodes[{i}]", p).get("name"), f"status.unhealthyNodes[{i}].name", p)
            if node:
                unhealthy.append(node)
    uid, api_version = meta.get("uid"), obj.get("apiVersion")
    queue, priority, active = spec.get("queueName"), spec.get("priority"), spec.get("active")
    cluster_queue = admission_d.get("clusterQueue")
    nominated = status.get("nominatedClusterNames")
    nominated_clusters = () if nominated is None else tuple(
        _intern(as_str(c, f"status.nominatedClusterNames[{i}]", p))
        for i, c in enumerate(as_list(nominated, "status.nominatedClusterNames", p)))
    worker = status.get("clusterName")

    wl = Workload(
        namespace=_intern(namespace),
        name=name,
        uid=uid if uid.__class__ is str else as_str(uid, "metadata.uid", p),
        api_version=_intern(api_version if api_version.__class__ is str else as_str(api_version, "apiVersion", p)),
        labels=interned_map(str_map(meta.get("labels"), "metadata.labels", p)),
        owner=owner,
        queue_name=_intern(queue if queue.__class__ is str else as_str(queue, "spec.queueName", p)),
        priority_class=_intern(priority_class),
        priority=priority if priority.__class__ is int else as_int(priority, "spec.priority", p),
        active=active if active.__class__ is bool else as_bool(active, "spec.active", p, True),
        created=_intern(created),
        created_seconds=_time(created, "metadata.creationTimestamp", p),
        conditions=conditions,
        requeue_count=as_int(requeue.get("count"), "status.requeueState.count", p),
        requeue_at=requeue_at,
        requeue_at_seconds=_time(requeue_at, "status.requeueState.requeueAt", p) if requeue_at else None,
        evictions=_evictions(status.get("schedulingStats"), p),
        admission_checks=_admission_checks(status.get("admissionChecks"), p),
        podsets=_podsets(spec.get("podSets"), gpu_resources, p, placing=admission.__class__ is not dict),
        admitted=isinstance(admission, dict),
        admission_cluster_queue=_intern(
            cluster_queue if cluster_queue.__class__ is str else as_str(cluster_queue, "status.admission.clusterQueue", p)),
        assignments=assignments,
        unhealthy_nodes=tuple(unhealthy),
        problems=(),  # below: the fields after it add theirs too
        past_execution_seconds=_past_execution(status, p),
        worker_cluster=_intern(worker) if worker.__class__ is str else as_str(worker, "status.clusterName", p),
        nominated_clusters=nominated_clusters,
        replaces_slice=isinstance(annotations := meta.get("annotations"), dict)
        and "kueue.x-k8s.io/workload-slice-replacement-for" in annotations,
    )
    if p:
        wl.problems = tuple(p)
    return wl


def _past_execution(status: dict, p: Problems) -> int | None:
    """Kueue's accumulated admitted time of earlier cycles. v1beta1 spells the field
    ``accumulatedPastExexcutionTimeSeconds`` (apis/kueue/v1beta1/workload_types.go:418, converted
    at workload_conversion.go:41-46), v1beta2 ``accumulatedPastExecutionTimeSeconds``
    (apis/kueue/v1beta2/workload_types.go:677-681)."""
    for key in ("accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds"):
        value = status.get(key)
        if value is not None:
            return as_int(value, "status." + key, p)
    return None


def _conditions(raw: Any, p: Problems) -> dict[str, Condition]:
    out: dict[str, Condition] = {}
    for i, c in enumerate(as_list(raw, "status.conditions", p)):
        if not isinstance(c, dict):
            p.append(f"status.conditions[{i}]: expected an object")
            continue
        ctype = c.get("type")
        if not isinstance(ctype, str) or not ctype:
            p.append(f"status.conditions[{i}].type missing")
            continue
        # Interned, the key too: a condition's type, reason and message repeat across Workloads
        # ("The workload is admitted"), 10 MiB of copies for the benchmark cluster's 20,000.
        ctype = _intern(ctype)
        status, reason, message, ltt = c.get("status"), c.get("reason"), c.get("message"), c.get("lastTransitionTime")
        if status.__class__ is str and reason.__class__ is str and message.__class__ is str and ltt.__class__ is str and ltt:
            seconds = parse_time(ltt)  # every field as metav1.Condition has it (the common case): no path built
            if seconds is not None:
                out[ctype] = Condition(ctype, _intern(status), _intern(reason), _intern(message), _intern(ltt), seconds)
                continue
        if isinstance(status, bool):  # unquoted YAML True/False in a hand-written dump
            p.append(f"status.conditions[{i}].status: boolean instead of a string")
            status = "True" if status else "False"
        w = f"status.conditions[{i}]"
        ltt = as_str(ltt, w + ".lastTransitionTime", p)
        out[ctype] = Condition(
            ctype, _intern(as_str(status, w + ".status", p)), _intern(as_str(reason, w + ".reason", p)),
            _intern(as_str(message, w + ".message", p)), _intern(ltt), _time(ltt, w + ".lastTransitionTime", p),
        )
    return out


def _time(value: str, what: str, p: Problems) -> float | None:
    if not value:
        return None
    seconds = parse_time(value)
    if seconds is None:
        p.append(f"{what}: not an RFC 3339 time: {value!r}")
    return seconds


def _evictions(raw: Any, p: Problems) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    stats = raw if raw.__class__ is dict else as_dict(raw, "status.schedulingStats", p)
    for i, e in enumerate(as_list(stats.get("evictions"), "status.schedulingStats.evictions", p)):
        if e.__class__ is dict:
            count, reason, cause = e.get("count"), e.get("reason"), e.get("underlyingCause")
            if count.__class__ is int and reason.__class__ is str and cause.__class__ is str:
                key = (reason, cause)
                out[key] = out.get(key, 0) + count
                continue
        w = f"status.schedulingStats.evictions[{i}]"
        e = as_dict(e, w, p)
        count = as_int(e.get("count"), w + ".count", p, 0) or 0
        key = (as_str(e.get("reason"), w + ".reason", p), as_str(e.get("underlyingCause"), w + ".underlyingCause", p))
        out[key] = out.get(key, 0) + count
    return out


def _admission_checks(raw: Any, p: Problems) -> tuple[AdmissionCheck, ...]:
    """``status.admissionChecks[]``; a state outside the API's enum is a problem (its check is
    kept, its state series left out)."""
    out: list[AdmissionCheck] = []
    if raw is None:
        return tuple(out)
    for i, c in enumerate(as_list(raw, "status.admissionChecks", p)):
        w = f"status.admissionChecks[{i}]"
        c = as_dict(c, w, p)
        name = as_str(c.get("name"), w + ".name", p)
        if not name:
            p.append(f"{w}.name missing")
            continue
        state = as_str(c.get("state"), w + ".state", p)
        if state not in CHECK_STATES:
            p.append(f"{w}.state: unknown admission check state {state!r}")
        transition = as_str(c.get("lastTransitionTime"), w + ".lastTransitionTime", p)
        out.append(AdmissionCheck(
            name=name, state=state, message=as_str(c.get("message"), w + ".message", p),
            last_transition_seconds=_time(transition, w + ".lastTransitionTime", p),
            requeue_after_seconds=as_int(c.get("requeueAfterSeconds"), w + ".requeueAfterSeconds", p),
            retry_count=as_int(c.get("retryCount"), w + ".retryCount", p),
        ))
    return tuple(out)


def _podsets(raw: Any, gpu_resources: Sequence[str], p: Problems, placing: bool = True) -> tuple[PodSet, ...]:
    """``placing``: the Workload waits for a placement (no admission), so the pod templates'
    tolerations and node selector, which only the fit of a waiting Workload reads
    (exporter.cluster.capacity), are parsed too; an admitted Workload's are not, by the ten thousand."""
    # Fields of the expected type are taken as they are; only the others go through the
    # tolerant accessors, with the path for their problem (built only then: this runs per event).
    out = []
    for i, ps in enumerate(raw if raw.__class__ is list else as_list(raw, "spec.podSets", p)):
        w = f"spec.podSets[{i}]"
        if ps.__class__ is not dict:
            ps = as_dict(ps, w, p)
        template = ps.get("template")
        if template.__class__ is not dict:
            template = as_dict(template, w + ".template", p)
        tmeta, spec = template.get("metadata"), template.get("spec")
        if tmeta.__class__ is not dict:
            tmeta = as_dict(tmeta, w + ".template.metadata", p)
        if spec.__class__ is not dict:
            spec = as_dict(spec, w + ".template.spec", p)
        name, count = ps.get("name"), ps.get("count")
        if name.__class__ is not str:
            name = as_str(name, w + ".name", p, "main")
        if count.__class__ is not int:
            count = as_int(count, w + ".count", p, 1)
        tolerations, selector = (spec.get("tolerations"), spec.get("nodeSelector")) if placing else (None, None)
        out.append(PodSet(
            name=_intern(name) if name else "main",
            count=count or 0,
            gpus_per_pod=pod_gpus(spec, gpu_resources, p, w + ".template.spec"),
            labels=_shared_map(_only(str_map(tmeta.get("labels"), w + ".template.metadata.labels", p), TEMPLATE_LABEL_KEYS)),
            annotations=_shared_map(_only(str_map(tmeta.get("annotations"), w + ".template.metadata.annotations", p),
                                          TEMPLATE_ANNOTATION_KEYS)),
            scheduling_group=_scheduling_group(spec.get("schedulingGroup"), w, p),
            topology=_topology_request(ps.get("topologyRequest"), w, p),
            tolerations=parse_tolerations(tolerations, w + ".template.spec.tolerations", p) if tolerations is not None else (),
            node_selector=_shared_map(str_map(selector, w + ".template.spec.nodeSelector", p)) if selector is not None else _EMPTY,
            requests=pod_requests(spec, w + ".template.spec", p),
            affinity=required_affinity(spec, w + ".template.spec", p) if placing else None,
            min_count=as_int(ps.get("minCount"), w + ".minCount", p) if ps.get("minCount") is not None else None,
        ))
    return tuple(out)


_REQUESTS: dict[TopologyRequest, TopologyRequest] = {}  # a handful of distinct requests, shared
_RAW_REQUESTS: dict[tuple[tuple[str, Any], ...], TopologyRequest] = {}  # raw fields -> their parsed request


def _topology_request(raw: Any, where: str, p: Problems) -> TopologyRequest | None:
    """``spec.podSets[i].topologyRequest``; None without one. Kueue copies it from the pod set's
    ``kueue.x-k8s.io/podset-*-topology`` annotations (pkg/controller/jobframework/tas.go:60-70), so the field is the
    one source to read."""
    if raw is None:
        return None
    try:  # the same fields seen before, already parsed without a problem (one lookup per event)
        return _RAW_REQUESTS[tuple(raw.items())]
    except (KeyError, TypeError, AttributeError):
        pass
    before = len(p)
    w = where + ".topologyRequest"
    if raw.__class__ is not dict:
        raw = as_dict(raw, w, p)
    required, preferred = as_str(raw.get("required"), w + ".required", p), as_str(raw.get("preferred"), w + ".preferred", p)
    unconstrained = as_bool(raw.get("unconstrained"), w + ".unconstrained", p, False)
    slices: list[tuple[str, int]] = []
    for i, layer in enumerate(as_list(raw.get("podsetSliceRequiredTopologyConstraints"), w + ".podsetSliceRequiredTopologyConstraints", p)):
        lw = f"{w}.podsetSliceRequiredTopologyConstraints[{i}]"
        layer = as_dict(layer, lw, p)
        slices.append((as_str(layer.get("topology"), lw + ".topology", p), as_int(layer.get("size"), lw + ".size", p, 0) or 0))
    if not slices:
        key = as_str(raw.get("podSetSliceRequiredTopology"), w + ".podSetSliceRequiredTopology", p)
        if key:
            slices.append((key, as_int(raw.get("podSetSliceSize"), w + ".podSetSliceSize", p, 0) or 0))
    group = as_str(raw.get("podSetGroupName"), w + ".podSetGroupName", p)
    request = TopologyRequest(required, preferred, unconstrained, tuple(slices), group)
    request = shared(_REQUESTS, request, request)
    if len(p) == before and raw.__class__ is dict:
        try:
            shared(_RAW_REQUESTS, tuple(raw.items()), request)
        except TypeError:  # a field Kueue does not read holds a list or an object: not kept
            pass
    return request


def _scheduling_group(raw: Any, where: str, p: Problems) -> str:
    """The native PodGroup a pod template names (``spec.schedulingGroup.podGroupName``), or ""."""
    if raw is None:
        return ""
    group = as_dict(raw, where + ".template.spec.schedulingGroup", p).get("podGroupName")
    return as_str(group, where + ".template.spec.schedulingGroup.podGroupName", p)


def _container_gpus(c: Any, gpu_resources: Sequence[str], p: Problems, where: str, i: int) -> float:
    """GPUs of container ``i`` of the list at ``where`` (the path is only built for a problem)."""
    resources = c.get("resources") if c.__class__ is dict else as_dict(c, f"{where}[{i}]", p).get("resources")
    if resources.__class__ is not dict:
        resources = as_dict(resources, f"{where}[{i}].resources", p)
    if not resources:
        return 0
    requests, limits = resources.get("requests", _EMPTY), resources.get("limits", _EMPTY)
    if requests.__class__ is not dict:
        requests = as_dict(requests, f"{where}[{i}].resources.requests", p)
    if limits.__class__ is not dict:
        limits = as_dict(limits, f"{where}[{i}].resources.limits", p)
    total: float = 0
    for res in gpu_resources:
        # Extended resources cannot be overcommitted: a limit alone implies the same request.
        q = requests.get(res, limits.get(res))
        if q is not None:
            try:
                total += parse_quantity(q)
            except ValueError:
                p.append(f"{where}[{i}].resources: bad quantity for {res}: {q!r}")
    return total


def pod_gpus(pod_spec: dict, gpu_resources: Sequence[str], p: Problems, what: str = "spec") -> float:
    """GPUs one pod holds, the way the scheduler counts an effective request.

    max(sum of app containers + restartable init containers (sidecars), the largest init
    container plus the sidecars started before it).
    """
    containers, inits = pod_spec.get("containers"), pod_spec.get("initContainers")
    if containers.__class__ is not list:
        containers = as_list(containers, what + ".containers", p)
    app: float = 0
    for i, c in enumerate(containers):
        app += _container_gpus(c, gpu_resources, p, what + ".containers", i)
    sidecars: float = 0
    init_peak: float = 0
    if inits is not None:
        for i, c in enumerate(as_list(inits, what + ".initContainers", p)):
            g = _container_gpus(c, gpu_resources, p, what + ".initContainers", i)
            if isinstance(c, dict) and c.get("restartPolicy") == "Always":
                sidecars += g
            else:
                init_peak = max(init_peak, g + sidecars)
    return max(app + sidecars, init_peak)


def _assignments(raw: Any, p: Problems) -> tuple[Assignment, ...]:
    out = []
    for i, a in enumerate(raw if raw.__class__ is list else as_list(raw, "status.admission.podSetAssignments", p)):
        w = f"status.admission.podSetAssignments[{i}]"
        if a.__class__ is not dict:
            a = as_dict(a, w, p)
        levels: tuple[str, ...] = ()
        domains: tuple[Domain, ...] = ()
        shape = None
        ta = a.get("topologyAssignment")
        if ta is not None:
            hosts = _host_domains(ta)
            if hosts is not None:
                (domains, shape), levels = hosts, (_intern(ta["levels"][0]),)
            else:
                try:
                    domains = tuple(iter_domains(ta))
                    levels = tuple(map(_intern, ta["levels"]))
                except AssignmentError as exc:
                    p.append(f"{w}.topologyAssignment: {exc}")
                    domains = ()
        name, count = a.get("name"), a.get("count")
        out.append(Assignment(
            name=(name if name.__class__ is str else as_str(name, w + ".name", p, "main")) or "main",
            count=count if count.__class__ is int else as_int(count, w + ".count", p),
            flavors=_shared_map(str_map(a.get("flavors"), w + ".flavors", p)),
            levels=levels,
            domains=domains,
            shape=shape,
        ))
    return tuple(out)


def _host_domains(ta: Any) -> tuple[tuple[Domain, ...], Shape] | None:
    """The common assignment, v1beta2 slices of one level (the hostname) with individual values
    and a universal pod count, as shared Domains, and its shape (see :class:`Assignment`);
    ``None`` for any other shape or anything invalid, which :func:`iter_domains` then expands
    (or rejects with the precise error). The same expansion, but this runs for every Workload
    of every event, so it skips the general checks, and a host seen before creates nothing.
    """
    if ta.__class__ is not dict or "domains" in ta:
        return None
    levels, slices = ta.get("levels"), ta.get("slices")
    if levels.__class__ is not list or len(levels) != 1 or levels[0].__class__ is not str or slices.__class__ is not list:
        return None
    parts = []
    for sl in slices:
        if sl.__class__ is not dict:
            return None
        n, per_level, pods = sl.get("domainCount"), sl.get("valuesPerLevel"), sl.get("podCounts")
        if n.__class__ is not int or per_level.__class__ is not list or len(per_level) != 1 or pods.__class__ is not dict:
            return None
        v = per_level[0]
        if v.__class__ is not dict or v.get("universal") is not None or pods.get("individual") is not None:
            return None
        ind, count = v.get("individual"), pods.get("universal")
        if ind.__class__ is not dict or count.__class__ is not int:
            return None
        roots, prefix, suffix = ind.get("roots"), ind.get("prefix") or "", ind.get("suffix") or ""
        if roots.__class__ is not list or len(roots) != n or prefix.__class__ is not str or suffix.__class__ is not str:
            return None
        parts.append((prefix, suffix, count, tuple(roots)))
    out: list[Domain] = []
    for prefix, suffix, count, roots in parts:
        shared = _DOMAINS.get(count)
        if shared is None or len(shared) >= SHARED_LIMIT:
            shared = _DOMAINS[count] = {}
        for root in roots:
            if root.__class__ is not str:
                return None
            value = prefix + root + suffix
            d = shared.get(value)
            if d is None:
                d = shared[value] = Domain((_intern(value),), count)
            out.append(d)
    return tuple(out), Shape()


# Rendering builds each family's lines of one Workload with :meth:`Family.lines`: one head (the
# metric name and the Workload's escaped ``namespace``/``workload``, a :class:`LabelPairs` made
# once per Workload) joined with a tail per line (the remaining declared labels and the value),
# from a table or a cache: the tails repeat across Workloads (stages, conditions, hosts), so one
# C-level join replaces a formatted line each. Lines are built as UTF-8 bytes, as the exposition
# keeps them: a Workload's 5 kB are then written once, not formatted and then encoded.
# State families carry the current state only (one series, value 1): a state set with a series
# per possible state cost 12 series per Workload for the stage alone, 11 of them 0.
_STAGE_TAILS = {stage: WORKLOAD_STAGE.tail(2, [stage], 1) for stage in STAGES}
_CHECK_TAILS = {state: WORKLOAD_ADMISSION_CHECK.tail(3, [state], 1) for state in CHECK_STATES}
_CONDITION_TAILS: dict[tuple[str, str, str], bytes] = {}
_PENDING_TAILS: dict[tuple[str, str], bytes] = {}
_POD_TAILS: dict[tuple[Path, int], bytes] = {}


def _info_tail(cache: dict, family: Family, key: tuple[str, ...]) -> bytes:
    """The tail of a value-1 line of ``family`` after namespace and workload, from ``cache``."""
    tail = cache.get(key)
    if tail is None:
        if len(cache) >= SHARED_LIMIT:
            cache.clear()
        tail = cache[key] = family.tail(2, key, 1)
    return tail


def _check_lines(wl: Workload, lead: LabelPairs, out: list[tuple[Family, bytes, int]], skip: Collection[Family]) -> None:
    states, times, n_states, n_times = [], [], 0, 0
    with_states, with_times = WORKLOAD_ADMISSION_CHECK not in skip, WORKLOAD_ADMISSION_CHECK_TRANSITION not in skip
    for c in wl.admission_checks:
        check = lead.plus(("check",), (c.name,))
        tail = _CHECK_TAILS.get(c.state) if with_states else None
        if tail is not None:
            states.append(WORKLOAD_ADMISSION_CHECK.head(check) + tail)
            n_states += 1
        if c.last_transition_seconds is not None and with_times:
            times.append(WORKLOAD_ADMISSION_CHECK_TRANSITION.line(check, c.last_transition_seconds))
            n_times += 1
    if n_states:
        out.append((WORKLOAD_ADMISSION_CHECK, b"".join(states), n_states))
    if n_times:
        out.append((WORKLOAD_ADMISSION_CHECK_TRANSITION, b"".join(times), n_times))


def _pod_tails(a: Assignment, fragment: Callable[[Path], LabelPairs]) -> list[bytes]:
    """The ``<topology labels>} pods`` tail of each domain of ``a.placed``, domains with one
    path (an unknown Node) added up."""
    pairs: Sequence[tuple[Path, int]] = a.placed
    if len({path for path, _ in pairs}) != len(pairs):  # domains with one known path (unknown Node) add up
        per_path: dict[Path, int] = {}
        for path, pods in pairs:
            per_path[path] = per_path.get(path, 0) + pods
        pairs = list(per_path.items())
    cache = _POD_TAILS
    tails = []
    for pair in pairs:
        tail = cache.get(pair)
        if tail is None:
            if len(cache) >= SHARED_LIMIT:
                cache.clear()
            tail = cache[pair] = WORKLOAD_TOPOLOGY_PODS.tail(3, (), pair[1], fragment(pair[0]))
        tails.append(tail)
    return tails


def _quality_tails(a: Assignment, with_spanned: bool = True, with_locality: bool = True) -> tuple[list[bytes], list[bytes]]:
    """Tails (after ``namespace``, ``workload``, ``podset``) of the spanned and the locality
    lines per level above the host where the assignment's pods have a domain: the distinct
    domains of that level, and the largest share of the pods in one of them. Levels outside the
    flavor's Topology (all values "") are left out; so are the tails of a family not ``with``."""
    placed: Sequence[tuple[Path, int]] = a.placed
    total = sum(pods for _, pods in placed)
    spanned: list[bytes] = []
    locality: list[bytes] = []
    if placed and total > 0:
        for i in range(len(placed[0][0]) - 1):
            per_domain: dict[Path, int] = {}
            for path, pods in placed:
                if path[i][1]:
                    domain = path[: i + 1]
                    per_domain[domain] = per_domain.get(domain, 0) + pods
            if per_domain:
                level = (placed[0][0][i][0],)
                if with_spanned:
                    spanned.append(WORKLOAD_DOMAINS_SPANNED.tail(3, level, len(per_domain)))
                if with_locality:
                    locality.append(WORKLOAD_LOCALITY_RATIO.tail(3, level, max(per_domain.values()) / total))
    return spanned, locality


_REQUEST_TAILS: dict[tuple[Any, ...], tuple[bytes, ...]] = {}  # (pod set, request, level names) -> line tails


def _request_lines(wl: Workload, lead: LabelPairs, level_name: Callable[[str], str], out: list[tuple[Family, bytes, int]]) -> None:
    lines: list[bytes] = []
    n = 0
    for ps in wl.podsets:
        tr = ps.topology
        if tr is None:
            continue
        names = (level_name(tr.level), *(level_name(key) for key, _ in tr.slices))
        key = (ps.name, tr, names)
        tails = _REQUEST_TAILS.get(key)
        if tails is None:
            found = [WORKLOAD_TOPOLOGY_REQUEST.tail(3, (tr.mode, names[0]), 1)] if tr.mode else []
            found += [WORKLOAD_TOPOLOGY_REQUEST.tail(3, ("slice_required", name), size)
                      for (_, size), name in zip(tr.slices, names[1:])]
            tails = shared(_REQUEST_TAILS, key, tuple(found))
        if tails:
            lines.append(WORKLOAD_TOPOLOGY_REQUEST.lines(lead.plus(("podset",), (ps.name,)), tails))
            n += len(tails)
    if n:
        out.append((WORKLOAD_TOPOLOGY_REQUEST, b"".join(lines), n))


def render_workload(wl: Workload, fragment: Callable[[Path], LabelPairs],
                    level_name: Callable[[str], str] = str, detail: bool = True,
                    skip: Collection[Family] = ()) -> list[tuple[Family, bytes, int]]:
    """All sample lines of one Workload: per family, one UTF-8 string and its number of lines
    (for :meth:`Exposition.set_counted`, in a list: a dict would hash each Family); ``fragment(path)``
    is a topology path's rendered labels (a pure function of the path, so its results are cached
    here); ``level_name(key)`` is the label name of a topology level's node label key (the key
    itself when it is no level).

    ``detail`` False (the store's word for a finished or deactivated Workload past
    ``--finished-detail``) renders the summary only: info, stage, the Finished condition, pending
    reason, times, requested GPUs, past execution and evictions, at most 12 series for a Workload
    with up to four eviction reasons; its placement, topology request, placement quality and
    admission checks go. Per-host placement (gangscope_workload_topology_pods) is rendered for a
    Workload that holds quota now, or one evicted and waiting to be admitted again (its last
    placement: the eviction alerts route by its domains), never for a finished one.

    This runs on every watch event for tens of thousands of objects: lines share one escaped
    ``namespace,workload`` lead and cached tails (see ``_STAGE_TAILS``) instead of per-label code.
    Families in ``skip`` (left out by --metric-denylist/--metric-allowlist) are not formatted.
    """
    lead = label_pairs(_NW, (wl.namespace, wl.name))
    owner_kind, owner_name = (wl.owner.kind, wl.owner.name) if wl.owner else ("", "")
    conditions = wl.conditions
    state = wl.state
    if state is None:
        raise ValueError(f"workload {wl.namespace}/{wl.name} rendered before its state was set")
    shown = conditions.values() if detail else [c for c in conditions.values() if c.type == "Finished"]
    out: list[tuple[Family, bytes, int]] = []
    if WORKLOAD_INFO not in skip:
        out.append((WORKLOAD_INFO, WORKLOAD_INFO.line(lead, 1, (
            wl.cluster_queue, wl.queue_name, wl.priority_class, owner_kind, owner_name, wl.worker_cluster,
            ",".join(wl.nominated_clusters))), 1))
    if WORKLOAD_STAGE not in skip:
        out.append((WORKLOAD_STAGE, WORKLOAD_STAGE.head(lead) + _STAGE_TAILS[state.stage], 1))
    if shown and WORKLOAD_CONDITION not in skip:
        out.append((WORKLOAD_CONDITION, WORKLOAD_CONDITION.lines(lead, [
            _info_tail(_CONDITION_TAILS, WORKLOAD_CONDITION, (c.type, c.status, c.reason)) for c in shown]), len(shown)))
    pending = state.pending
    if pending is not None and WORKLOAD_PENDING_REASON not in skip:
        out.append((WORKLOAD_PENDING_REASON, WORKLOAD_PENDING_REASON.head(lead)
                    + _info_tail(_PENDING_TAILS, WORKLOAD_PENDING_REASON, (pending.reason, pending.category)), 1))
    if wl.created_seconds is not None and WORKLOAD_CREATED not in skip:
        out.append((WORKLOAD_CREATED, WORKLOAD_CREATED.line(lead, wl.created_seconds), 1))
    for ctype, fam in _TIMESTAMPS:
        c = conditions.get(ctype)
        if c is not None and c.status == "True" and c.last_transition_seconds is not None and fam not in skip:
            out.append((fam, fam.line(lead, c.last_transition_seconds), 1))
    if wl.evictions and WORKLOAD_EVICTIONS not in skip:
        out.append((WORKLOAD_EVICTIONS, WORKLOAD_EVICTIONS.lines(
            lead, [WORKLOAD_EVICTIONS.tail(2, key, n) for key, n in wl.evictions.items()]), len(wl.evictions)))
    if WORKLOAD_REQUESTED_GPUS not in skip:
        gpus = sum(ps.count * ps.gpus_per_pod for ps in wl.podsets)
        out.append((WORKLOAD_REQUESTED_GPUS, WORKLOAD_REQUESTED_GPUS.line(lead, gpus), 1))
    if wl.past_execution_seconds is not None and WORKLOAD_PAST_EXECUTION not in skip:
        out.append((WORKLOAD_PAST_EXECUTION, WORKLOAD_PAST_EXECUTION.line(lead, wl.past_execution_seconds), 1))
    if not detail:
        return out
    if wl.requeue_count is not None and WORKLOAD_REQUEUE_COUNT not in skip:
        out.append((WORKLOAD_REQUEUE_COUNT, WORKLOAD_REQUEUE_COUNT.line(lead, wl.requeue_count), 1))
    if wl.requeue_at_seconds is not None and WORKLOAD_REQUEUE_AT not in skip:
        out.append((WORKLOAD_REQUEUE_AT, WORKLOAD_REQUEUE_AT.line(lead, wl.requeue_at_seconds), 1))
    if wl.admission_checks:
        _check_lines(wl, lead, out, skip)
    pods, n = b"", 0
    if not wl.condition_true("Finished") and WORKLOAD_TOPOLOGY_PODS not in skip:
        for a in wl.last_assignments:
            tails = _pod_tails(a, fragment)
            pods += WORKLOAD_TOPOLOGY_PODS.lines(lead.plus(("podset",), (a.name,)), tails)
            n += len(tails)
    if n:
        out.append((WORKLOAD_TOPOLOGY_PODS, pods, n))
    with_spanned, with_locality = WORKLOAD_DOMAINS_SPANNED not in skip, WORKLOAD_LOCALITY_RATIO not in skip
    if wl.admitted and (with_spanned or with_locality):
        spanned, locality, n = b"", b"", 0
        for a in wl.last_assignments:
            spanned_tails, locality_tails = _quality_tails(a, with_spanned, with_locality)
            if spanned_tails or locality_tails:
                podset = lead.plus(("podset",), (a.name,))
                if with_spanned:
                    spanned += WORKLOAD_DOMAINS_SPANNED.lines(podset, spanned_tails)
                if with_locality:
                    locality += WORKLOAD_LOCALITY_RATIO.lines(podset, locality_tails)
                n += len(spanned_tails or locality_tails)
        if n and with_spanned:
            out.append((WORKLOAD_DOMAINS_SPANNED, spanned, n))
        if n and with_locality:
            out.append((WORKLOAD_LOCALITY_RATIO, locality, n))
    if WORKLOAD_TOPOLOGY_REQUEST not in skip:
        _request_lines(wl, lead, level_name, out)
    if wl.unhealthy_paths and WORKLOAD_UNHEALTHY_NODE not in skip:
        paths = dict.fromkeys(wl.unhealthy_paths)
        out.append((WORKLOAD_UNHEALTHY_NODE, WORKLOAD_UNHEALTHY_NODE.lines(
            lead, [WORKLOAD_UNHEALTHY_NODE.tail(2, (), 1, fragment(path)) for path in paths]), len(paths)))
    return out
