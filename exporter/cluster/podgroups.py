"""PodGroups of the four gang-scheduling APIs, parsed into one record shape, and their families.

A gang is "all of minMember pods bound, or none". Four APIs describe one, each with its own
words for the same few facts (research-gang.md):

* Coscheduling (scheduler-plugins) ``scheduling.x-k8s.io/v1alpha1`` and its pre-2023 group
  ``scheduling.sigs.k8s.io``: ``spec.minMember``, ``spec.scheduleTimeoutSeconds``,
  ``status.phase`` and pod counters, no conditions.
* Volcano ``scheduling.volcano.sh/v1beta1``: ``spec.minMember``, ``spec.queue``, ``status.phase``,
  pod counters and ``Unschedulable``/``Scheduled`` conditions with the scheduler's message.
* Native ``scheduling.k8s.io`` PodGroup (1.37 v1beta1 and v1alpha3, 1.36 v1alpha2):
  ``spec.schedulingPolicy.gang.minCount`` and the ``PodGroupScheduled`` (1.36) /
  ``PodGroupInitiallyScheduled`` (1.37) condition; no phase, no counters (kubernetes/api v0.36.0
  scheduling/v1alpha2/types.go:463-510; 10b39a39 scheduling/v1beta1/types.go:722-785). In 1.37 a
  PodGroup may name its parent ``CompositePodGroup`` (``spec.parentCompositePodGroupName``,
  v1beta1/types.go:616, v1alpha3/types.go:550), whose ``gang.minGroupCount`` children must be
  scheduled (v1alpha3/types.go:1177-1415; condition ``CompositePodGroupInitiallyScheduled``). The
  1.35 ``v1alpha1`` Workload has no status at all: each ``spec.podGroups[]`` entry becomes a record
  without a phase, so it can still be joined and its minCount exported; from 1.36 the Workload
  holds only templates (``podGroupTemplates``, ``compositePodGroupTemplates``), kept as
  :class:`NativeWorkload` for the join (its ``spec.controllerRef`` names the job).
* KAI Scheduler ``scheduling.run.ai/v2alpha2`` (KAI-Scheduler d5bc503a
  pkg/apis/scheduling/v2alpha2/podgroup_types.go): ``spec.minMember`` or ``minSubGroup`` over
  ``subGroups`` (each with ``parent``, ``minMember``/``minSubGroup``, ``topologyConstraint``),
  ``queue``, ``topologyConstraint{requiredTopologyLevel, preferredTopologyLevel, topology}``, and
  ``status.schedulingConditions`` (type ``UnschedulableOnNodePool``, typed ``reasons[]``, the
  deprecated ``reason``/``message``). No phase and no counters: commit b73c0fa1 removed the
  never-populated ones (KAI-Scheduler#1650); the older CRD still serves them, never filled, so
  they are ignored. The scheduler clears the scheduling conditions once no pod is pending
  (pkg/scheduler/cache/status_updater/default_status_updater.go:218-228, 680-685) and does not
  write them while pods are allocated (:309-312).

Native and KAI objects have no phase; their conditions are mapped to one (native ``Pending``,
``Scheduled``, ``Unschedulable``, ``SchedulerError``, ``Invalid``; KAI ``Pending``, ``Unschedulable``,
``Allocated``) so one state set serves every API. Every record also says
which *gang state* its phase means (waiting, partial, assembled, finished, failed): that is what
the join in :mod:`exporter.cluster.gangs` reasons with, whatever the API.

A phase outside the API's list, or a field of the wrong type, is kept as what it is, exported,
and reported in ``errors`` for the caller to count in ``gangscope_parse_errors_total``.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..exposition import Family, label_pairs
from ..fields import (
    ParseError, Problems, as_dict, as_int, as_list, as_str, interned_map, named_metadata, parse_quantity, parse_time, str_map,
)

Api = Literal["coscheduling", "volcano", "native", "kai"]
GangState = Literal["waiting", "partial", "assembled", "finished", "failed", "unreported", "unknown"]

COSCHEDULING_PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"
COSCHEDULING_LEGACY_PODGROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
KAI_POD_GROUP_ANNOTATION = "pod-group-name"  # on a pod or its template: the KAI PodGroup it belongs to
# KAI-Scheduler 72de64fc pkg/common/constants/constants.go:42-43, read in
# pkg/scheduler/api/podgroup_info/job_info.go:174-193: when the gang became stale (allocated pods
# below its minimum), and when the scheduler last allocated it whole.
KAI_STALE_ANNOTATION = "kai.scheduler/stale-podgroup-timestamp"
KAI_LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"

# Phases of each API, in the order the state set lists them, and what each means for the gang.
# Coscheduling's PreScheduling and Scheduled were removed in 2023 (scheduler-plugins #574) but old
# objects still carry them. Native phases are derived from the scheduling condition.
PHASES: dict[str, dict[str, GangState]] = {
    "coscheduling": {
        "Pending": "waiting", "Scheduling": "waiting", "Running": "assembled", "Finished": "finished",
        "Failed": "failed", "Unknown": "partial", "PreScheduling": "waiting", "Scheduled": "assembled",
    },
    "volcano": {
        "Pending": "waiting", "Inqueue": "waiting", "Running": "assembled", "Unknown": "partial",
        "Completed": "finished",
    },
    "native": {
        "Pending": "waiting", "Unschedulable": "waiting", "SchedulerError": "waiting", "Scheduled": "assembled",
        "Invalid": "waiting",
    },
    # KAI: Unschedulable while a scheduling condition is True; Allocated when resources are
    # allocated and no condition is left (it is cleared once nothing is pending): at least one pod
    # is allocated, which is not the gang (its last-start-timestamp annotation says that, see
    # exporter.cluster.gang_state); Pending says nothing (not processed yet, or finished and
    # released): only the pods can tell.
    "kai": {"Pending": "unreported", "Unschedulable": "waiting", "Allocated": "unreported"},
}

# How the phase timestamp was found: a condition's lastTransitionTime, the object's creation
# (a group is Pending from birth), or the time the collector saw the phase change.
SinceSource = Literal["condition", "created", "observed"]

_PG = ("namespace", "podgroup", "api")
PODGROUP_PHASE = Family(
    "gangscope_podgroup_phase", "gauge",
    "PodGroup phase: one series, value 1, labelled with the current phase (native and KAI groups, which have none: "
    "derived from their scheduling conditions); none once its Workload finished.",
    ("namespace", "podgroup", "api", "phase"),
)
PODGROUP_MIN_MEMBER = Family(
    "gangscope_podgroup_min_member", "gauge",
    "Pods the gang needs bound together (minMember, gang minCount for native groups, child groups (minGroupCount) for a "
    "CompositePodGroup, the fewest pods that satisfy a KAI group's sub-groups).",
    ("namespace", "podgroup", "api"),
)
PODGROUP_PODS = Family(
    "gangscope_podgroup_pods", "gauge",
    "Pods of the group by state, where the API reports them (Coscheduling, Volcano).",
    ("namespace", "podgroup", "api", "state"),
)
PODGROUP_PHASE_TIMESTAMP = Family(
    "gangscope_podgroup_phase_timestamp_seconds", "gauge",
    "When the current phase began: a condition's lastTransitionTime where the API has one, "
    "else the creation time while Pending, else when the collector saw the phase change.",
    ("namespace", "podgroup", "api"),
)
PODGROUP_INFO = Family(
    "gangscope_podgroup_info", "info",
    "PodGroup placement request: queue (Volcano, KAI), parent (a native CompositePodGroup), topology levels "
    "required and preferred (KAI topologyConstraint, native schedulingConstraints.topology), composite 1 for a "
    "CompositePodGroup.",
    ("namespace", "podgroup", "api", "queue", "parent", "required_topology", "preferred_topology", "composite"),
)
FAMILIES = (PODGROUP_PHASE, PODGROUP_MIN_MEMBER, PODGROUP_PODS, PODGROUP_PHASE_TIMESTAMP, PODGROUP_INFO)


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition: float | None


@dataclass(frozen=True, slots=True)
class SubGroup:
    """A KAI PodGroup's ``spec.subGroups[]`` entry (podgroup_types.go:149-178)."""

    name: str
    parent: str
    min_member: int | None
    min_subgroups: int | None
    required_topology: str
    preferred_topology: str


@dataclass(frozen=True, slots=True)
class Unschedulable:
    """Why the scheduler says the group cannot be placed: a typed reason and its message."""

    reason: str
    message: str


@dataclass(slots=True)
class PodGroupRecord:
    """What gangscope keeps of one PodGroup (or one podGroups[] entry of a 1.35 native Workload)."""

    source: str
    api: Api
    namespace: str
    name: str
    uid: str = ""
    created: float | None = None
    owner_uids: tuple[str, ...] = ()
    owner_names: tuple[tuple[str, str], ...] = ()  # (kind, name) of ownerReferences / controllerRef
    labels: dict[str, str] = field(default_factory=dict)  # metadata.labels (none for a native Workload's podGroups[] entry)
    min_member: int | None = None
    schedule_timeout_seconds: int | None = None
    phase: str | None = None  # None: the API reports no status for this group
    running: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    queue: str = ""
    occupied_by: str = ""
    workload_ref: str = ""  # native: the scheduling.k8s.io Workload this group belongs to
    template: str = ""  # native: the Workload's template it was made from
    parent: str = ""  # native: spec.parentCompositePodGroupName
    composite: bool = False  # a native CompositePodGroup: min_member counts child groups
    subgroups: tuple[SubGroup, ...] = ()  # KAI
    min_subgroups: int | None = None  # KAI spec.minSubGroup
    required_topology: str = ""
    preferred_topology: str = ""
    unschedulable: tuple[Unschedulable, ...] = ()  # the scheduler's typed reasons (KAI, Volcano, native)
    min_task_member: tuple[tuple[str, int], ...] = ()  # Volcano spec.minTaskMember: (task, pods) by volcano.sh/task-spec
    min_resources: tuple[tuple[str, str], ...] = ()  # Volcano spec.minResources, what the queue must fit to enqueue it
    not_modelled: str = ""  # a rule of the scheduler gangscope does not model for this group (its members are "unknown")
    stale_since: float | None = None  # KAI annotation kai.scheduler/stale-podgroup-timestamp
    last_start: float | None = None  # KAI annotation kai.scheduler/last-start-timestamp
    conditions: tuple[Condition, ...] = ()
    phase_since: float | None = None
    since_source: SinceSource = "observed"
    errors: tuple[str, ...] = ()  # a tuple: the one empty tuple for the groups without problems
    # (source, namespace, name), made once: the gang index holds it per object and per gang (as
    # Workload.key, a tuple made per lookup was 40,000 tuples on the benchmark cluster).
    key: tuple[str, str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.key = (self.source, self.namespace, self.name)

    @property
    def api_label(self) -> str:
        """The ``api`` label of the group's series: its API, and ``coscheduling_legacy`` for the
        pre-2023 ``scheduling.sigs.k8s.io`` group, so that two PodGroups of one name in the two
        Coscheduling groups export different series."""
        return "coscheduling_legacy" if self.source == "podgroups_coscheduling_legacy" else self.api

    @property
    def gang_state(self) -> GangState:
        """What the phase means for the gang; a phase outside the API's list is "unknown" (never a stage
    gangscope would have to guess)."""
        if self.phase is None:
            return "unreported"
        return PHASES[self.api].get(self.phase, "unknown")

    @property
    def message(self) -> str:
        """The scheduler's own words on why the group is not placed, when the API carries them."""
        for u in self.unschedulable:
            if u.message:
                return u.message
        for cond in self.conditions:
            if cond.status == "False" and cond.type in NATIVE_CONDITIONS and cond.message:
                return cond.message
            if cond.status == "True" and cond.type == "Unschedulable" and cond.message:
                return cond.message
        return ""


def parse_conditions(status: Mapping, problems: Problems) -> tuple[Condition, ...]:
    out = []
    for i, c in enumerate(as_list(status.get("conditions"), "status.conditions", problems)):
        where = f"status.conditions[{i}]"
        if not isinstance(c, dict):
            problems.append(f"{where}: expected an object, got {type(c).__name__}")
            continue
        ltt = as_str(c.get("lastTransitionTime"), f"{where}.lastTransitionTime", problems)
        out.append(Condition(
            as_str(c.get("type"), f"{where}.type", problems), as_str(c.get("status"), f"{where}.status", problems),
            as_str(c.get("reason"), f"{where}.reason", problems), as_str(c.get("message"), f"{where}.message", problems),
            parse_time(ltt) if ltt else None,
        ))
    return tuple(out)


def owner_refs(meta: dict, problems: Problems) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """Owner uids and (kind, name) pairs of an object, the controller owner first: it is the job
    a Kueue Workload is keyed on."""
    uids: list[str] = []
    names: list[tuple[str, str]] = []
    refs = [r for r in as_list(meta.get("ownerReferences"), "metadata.ownerReferences", problems) if isinstance(r, dict)]
    for ref in sorted(refs, key=lambda r: not r.get("controller")):
        uid, name = ref.get("uid"), ref.get("name")
        # Interned: the owner's uid, kind and name are the Workload's and the gang's too.
        if isinstance(uid, str) and uid:
            uids.append(sys.intern(uid))
        if isinstance(name, str) and name:
            names.append((sys.intern(str(ref.get("kind") or "")), sys.intern(name)))
    return tuple(uids), tuple(names)


def _metadata(source: str, api: Api, obj: Any, problems: Problems) -> PodGroupRecord:
    meta = named_metadata(obj)
    uids, names = owner_refs(meta, problems)
    created = as_str(meta.get("creationTimestamp"), "metadata.creationTimestamp", problems)
    return PodGroupRecord(
        source=source, api=api, namespace=sys.intern(as_str(meta.get("namespace"), "metadata.namespace", problems)),
        name=sys.intern(meta["name"]),
        uid=as_str(meta.get("uid"), "metadata.uid", problems), created=parse_time(created) if created else None,
        labels=interned_map(str_map(meta.get("labels"), "metadata.labels", problems)),
        owner_uids=uids, owner_names=names,
    )


def _counters(rec: PodGroupRecord, status: dict, problems: Problems) -> None:
    rec.running = as_int(status.get("running"), "status.running", problems, 0)
    rec.succeeded = as_int(status.get("succeeded"), "status.succeeded", problems, 0)
    rec.failed = as_int(status.get("failed"), "status.failed", problems, 0)


def parse_coscheduling(source: str, obj: Any) -> PodGroupRecord:
    problems: Problems = []
    rec = _metadata(source, "coscheduling", obj, problems)
    spec, status = as_dict(obj.get("spec"), "spec", problems), as_dict(obj.get("status"), "status", problems)
    rec.min_member = as_int(spec.get("minMember"), "spec.minMember", problems)
    rec.schedule_timeout_seconds = as_int(spec.get("scheduleTimeoutSeconds"), "spec.scheduleTimeoutSeconds", problems)
    # The controller moves "" to Pending at once; an object it has not reconciled yet is Pending.
    rec.phase = sys.intern(as_str(status.get("phase"), "status.phase", problems)) or "Pending"
    _counters(rec, status, problems)
    rec.occupied_by = as_str(status.get("occupiedBy"), "status.occupiedBy", problems)
    rec.errors = tuple(problems)
    return rec


def parse_volcano(source: str, obj: Any) -> PodGroupRecord:
    problems: Problems = []
    rec = _metadata(source, "volcano", obj, problems)
    spec, status = as_dict(obj.get("spec"), "spec", problems), as_dict(obj.get("status"), "status", problems)
    rec.min_member = as_int(spec.get("minMember"), "spec.minMember", problems)
    rec.queue = as_str(spec.get("queue"), "spec.queue", problems) or "default"
    rec.min_task_member = tuple(sorted(
        (str(task), n) for task, raw in as_dict(spec.get("minTaskMember"), "spec.minTaskMember", problems).items()
        if (n := as_int(raw, f"spec.minTaskMember.{task}", problems)) is not None))
    rec.min_resources = tuple(sorted(
        (str(k), str(v)) for k, v in as_dict(spec.get("minResources"), "spec.minResources", problems).items()))
    if as_list(spec.get("subGroupPolicy"), "spec.subGroupPolicy", problems):
        # volcano ed72c7c8 staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/types.go:218-268:
        # sub-groups of the pods chosen by labelSelector and matchLabelKeys, each ready at its
        # subGroupSize, at least minSubGroups of each policy (pkg/scheduler/api/job_info.go:523-537,
        # sub_job_info.go:170-200; actions/allocate/allocate.go:214-231). The pods' labels are not
        # kept, so the members cannot be split the way Volcano splits them.
        rec.not_modelled = "Volcano subGroupPolicy (sub-group minimums by pod labels)"
    rec.phase = sys.intern(as_str(status.get("phase"), "status.phase", problems)) or "Pending"
    _counters(rec, status, problems)
    rec.conditions = parse_conditions(status, problems)
    # volcano-sh/volcano ed72c7c8 pkg/scheduler/framework/session.go:619-627: Unschedulable=True
    # with the gang's reason (NotEnoughResources); it stays after the group runs (the Volcano doc's
    # Running PodGroup carries one), so the gang index shows it only while the gang waits.
    rec.unschedulable = tuple(Unschedulable(c.reason, c.message) for c in rec.conditions
                              if c.type == "Unschedulable" and c.status == "True" and c.reason)
    rec.errors = tuple(problems)
    return rec


def _gang_min_count(policy: dict, where: str, problems: Problems) -> int | None:
    gang = policy.get("gang")
    if gang is None:
        return None
    return as_int(as_dict(gang, f"{where}.gang", problems).get("minCount"), f"{where}.gang.minCount", problems)


# The native scheduling condition, by version: 1.36 PodGroupScheduled (v0.36.0
# scheduling/v1alpha2/types.go:506), renamed PodGroupInitiallyScheduled in 1.37 (kubernetes#139743;
# 10b39a39 v1beta1/types.go:769, v1alpha3/types.go:703: "Once this condition transitions to True, it
# serves as a terminal state and will never revert to False, even if pods are subsequently evicted"),
# and the CompositePodGroup's CompositePodGroupInitiallyScheduled (v1alpha3/types.go:1387).
NATIVE_CONDITIONS = ("CompositePodGroupInitiallyScheduled", "PodGroupInitiallyScheduled", "PodGroupScheduled")


def _native_phase(conditions: tuple[Condition, ...]) -> tuple[str, float | None]:
    """Phase from the scheduling condition; it reflects the first scheduling decision only, so a
    gang that later lost a pod still says Scheduled: the pods (exporter.cluster.gangs) tell."""
    for ctype in NATIVE_CONDITIONS:
        for c in conditions:
            if c.type != ctype:
                continue
            if c.status == "True":
                return "Scheduled", c.last_transition
            if c.status == "False":
                return c.reason or "Pending", c.last_transition
    return "Pending", None


def parse_native(source: str, obj: Any) -> PodGroupRecord:
    problems: Problems = []
    rec = _metadata(source, "native", obj, problems)
    spec, status = as_dict(obj.get("spec"), "spec", problems), as_dict(obj.get("status"), "status", problems)
    policy = as_dict(spec.get("schedulingPolicy"), "spec.schedulingPolicy", problems)
    rec.min_member = _gang_min_count(policy, "spec.schedulingPolicy", problems)
    _native_common(rec, spec, status, problems, "podGroupTemplateRef", "podGroupTemplateName")
    rec.errors = tuple(problems)
    return rec


def _native_common(rec: PodGroupRecord, spec: dict, status: dict, problems: Problems, older_ref: str,
                   older_template: str) -> None:
    """What PodGroups and CompositePodGroups share: the Workload template they come from (1.37
    ``spec.workloadRef{workloadName, templateName}``; 1.36 ``spec.<older_ref>.workload{workloadName,
    <older_template>}``), parent, topology constraint, condition, phase."""
    ref = as_dict(spec.get("workloadRef"), "spec.workloadRef", problems)
    if not ref:
        tref = as_dict(spec.get(older_ref), f"spec.{older_ref}", problems)
        ref = as_dict(tref.get("workload"), f"spec.{older_ref}.workload", problems)
    rec.workload_ref = as_str(ref.get("workloadName"), "workloadName", problems)
    rec.template = as_str(ref.get("templateName", ref.get(older_template)), "templateName", problems)
    rec.parent = as_str(spec.get("parentCompositePodGroupName"), "spec.parentCompositePodGroupName", problems)
    if not rec.parent:  # an intermediate v1alpha2 shape (testdata golden becb2094): spec.parentRef
        parent_ref = as_dict(spec.get("parentRef"), "spec.parentRef", problems)
        rec.parent = as_str(parent_ref.get("compositePodGroupName"), "spec.parentRef.compositePodGroupName", problems)
    rec.required_topology = _native_topology(spec, problems)
    rec.conditions = parse_conditions(status, problems)
    rec.phase, since = _native_phase(rec.conditions)
    if since is not None:
        rec.phase_since, rec.since_source = since, "condition"
    rec.unschedulable = tuple(Unschedulable(c.reason, c.message) for c in rec.conditions
                              if c.type in NATIVE_CONDITIONS and c.status == "False" and c.reason)


def _native_topology(spec: dict, problems: Problems) -> str:
    """``schedulingConstraints.topology[0].key`` (the only constraint allowed; an early v1alpha2
    spelled it ``topologyConstraints[].topologyKey``, golden 15940cf2)."""
    constraints = as_dict(spec.get("schedulingConstraints"), "spec.schedulingConstraints", problems)
    for field_name, key_name in (("topology", "key"), ("topologyConstraints", "topologyKey")):
        for i, t in enumerate(as_list(constraints.get(field_name), f"spec.schedulingConstraints.{field_name}", problems)):
            key = as_str(as_dict(t, f"spec.schedulingConstraints.{field_name}[{i}]", problems).get(key_name),
                         f"spec.schedulingConstraints.{field_name}[{i}].{key_name}", problems)
            if key:
                return key
    return ""


def parse_native_composite(source: str, obj: Any) -> PodGroupRecord:
    """A 1.37 ``CompositePodGroup``: a gang of child groups (``gang.minGroupCount`` of them)."""
    problems: Problems = []
    rec = _metadata(source, "native", obj, problems)
    rec.composite = True
    spec, status = as_dict(obj.get("spec"), "spec", problems), as_dict(obj.get("status"), "status", problems)
    policy = as_dict(spec.get("schedulingPolicy"), "spec.schedulingPolicy", problems)
    gang = policy.get("gang")
    if gang is not None:
        rec.min_member = as_int(as_dict(gang, "spec.schedulingPolicy.gang", problems).get("minGroupCount"),
                                "spec.schedulingPolicy.gang.minGroupCount", problems)
    # an intermediate v1alpha2 (golden becb2094) named its template in compositePodGroupTemplateReference
    _native_common(rec, spec, status, problems, "compositePodGroupTemplateReference", "compositePodGroupTemplateName")
    rec.errors = tuple(problems)
    return rec


def _kai_topology(raw: Any, where: str, problems: Problems) -> tuple[str, str]:
    t = as_dict(raw, where, problems)
    return (as_str(t.get("requiredTopologyLevel"), f"{where}.requiredTopologyLevel", problems),
            as_str(t.get("preferredTopologyLevel"), f"{where}.preferredTopologyLevel", problems))


def parse_kai(source: str, obj: Any) -> PodGroupRecord:
    """A KAI Scheduler PodGroup (see the module docstring for what its status holds)."""
    problems: Problems = []
    rec = _metadata(source, "kai", obj, problems)
    spec, status = as_dict(obj.get("spec"), "spec", problems), as_dict(obj.get("status"), "status", problems)
    rec.min_member = as_int(spec.get("minMember"), "spec.minMember", problems)
    rec.min_subgroups = as_int(spec.get("minSubGroup"), "spec.minSubGroup", problems)
    annotations = str_map(named_metadata(obj).get("annotations"), "metadata.annotations", problems)
    for key, attr in ((KAI_STALE_ANNOTATION, "stale_since"), (KAI_LAST_START_ANNOTATION, "last_start")):
        if annotations.get(key):
            t = parse_time(annotations[key])
            if t is None:
                problems.append(f"metadata.annotations[{key}]: not a time: {annotations[key]!r}")
            setattr(rec, attr, t)
    rec.queue = as_str(spec.get("queue"), "spec.queue", problems)
    rec.required_topology, rec.preferred_topology = _kai_topology(spec.get("topologyConstraint"), "spec.topologyConstraint", problems)
    subgroups = []
    for i, g in enumerate(as_list(spec.get("subGroups"), "spec.subGroups", problems)):
        where = f"spec.subGroups[{i}]"
        g = as_dict(g, where, problems)
        name = as_str(g.get("name"), f"{where}.name", problems)
        if not name:
            problems.append(f"{where}: no name")
            continue
        required, preferred = _kai_topology(g.get("topologyConstraint"), f"{where}.topologyConstraint", problems)
        subgroups.append(SubGroup(name, as_str(g.get("parent"), f"{where}.parent", problems),
                                  as_int(g.get("minMember"), f"{where}.minMember", problems),
                                  as_int(g.get("minSubGroup"), f"{where}.minSubGroup", problems), required, preferred))
    rec.subgroups = tuple(subgroups)
    if rec.min_member is None and subgroups:
        rec.min_member = required_pods(rec)
    elif not rec.min_member:
        # KAI counts an absent or zero minMember as 1 (KAI-Scheduler 72de64fc
        # pkg/scheduler/api/podgroup_info/job_info.go:211: max(podGroup.Spec.MinMember, 1))
        rec.min_member = 1
    reasons: list[Unschedulable] = []
    since: list[float] = []
    for i, c in enumerate(as_list(status.get("schedulingConditions"), "status.schedulingConditions", problems)):
        where = f"status.schedulingConditions[{i}]"
        c = as_dict(c, where, problems)
        if as_str(c.get("status"), f"{where}.status", problems) != "True":
            continue
        ltt = as_str(c.get("lastTransitionTime"), f"{where}.lastTransitionTime", problems)
        if ltt and (t := parse_time(ltt)) is not None:
            since.append(t)
        typed = []
        for j, r in enumerate(as_list(c.get("reasons"), f"{where}.reasons", problems)):
            r = as_dict(r, f"{where}.reasons[{j}]", problems)
            reason = as_str(r.get("reason"), f"{where}.reasons[{j}].reason", problems)
            if reason:
                typed.append(Unschedulable(reason, as_str(r.get("message"), f"{where}.reasons[{j}].message", problems)))
        if not typed:  # before reasons[] existed: the deprecated reason and message
            typed.append(Unschedulable(as_str(c.get("reason"), f"{where}.reason", problems) or "Unschedulable",
                                       as_str(c.get("message"), f"{where}.message", problems)))
        reasons += [u for u in typed if u not in reasons]
    rec.unschedulable = tuple(reasons)
    allocated = as_dict(as_dict(status.get("resourcesStatus"), "status.resourcesStatus", problems).get("allocated"),
                        "status.resourcesStatus.allocated", problems)
    if reasons:
        rec.phase = "Unschedulable"
        if since:
            rec.phase_since, rec.since_source = max(since), "condition"
    elif any(_positive(v) for v in allocated.values()):
        rec.phase = "Allocated"
    else:
        rec.phase = "Pending"
    rec.errors = tuple(problems)
    return rec


def _positive(quantity: Any) -> bool:
    try:
        return parse_quantity(quantity) > 0
    except ValueError:
        return False


def required_pods(rec: PodGroupRecord) -> int | None:
    """The fewest pods that satisfy a KAI PodGroup's sub-group tree: a leaf needs its minMember,
    a node with minSubGroup k its k cheapest children, without it all of them
    (podgroup_types.go:36-50, 156-168)."""
    children: dict[str, list[SubGroup]] = {}
    for g in rec.subgroups:
        children.setdefault(g.parent, []).append(g)

    def need(kids: list[SubGroup], k: int | None, seen: frozenset[str]) -> int:
        costs = sorted(cost(g, seen) for g in kids)
        return sum(costs[:k] if k is not None else costs)

    def cost(g: SubGroup, seen: frozenset[str]) -> int:
        if g.name in seen:  # a cycle: invalid, count nothing below it
            return 0
        kids = children.get(g.name, [])
        if not kids:
            return g.min_member or 0
        return need(kids, g.min_subgroups, seen | {g.name})

    roots = children.get("", [])
    if not roots:
        return rec.min_member
    return need(roots, rec.min_subgroups, frozenset())


@dataclass(frozen=True, slots=True)
class Template:
    """A template of a native Workload: a PodGroup's (gang ``minCount``) or a CompositePodGroup's
    (``minGroupCount`` child groups), and the composite template it sits under ("" at the top)."""

    name: str
    composite: bool
    min_count: int | None
    parent: str


@dataclass(slots=True)
class NativeWorkload:
    """A ``scheduling.k8s.io`` Workload of any version.

    1.35 (v1alpha1, kubernetes/api v0.35.0 scheduling/v1alpha1/types.go:114-200): ``spec.podGroups[]``
    are the gangs themselves, one :class:`PodGroupRecord` each (``records``), named
    ``<workload>/<podGroup>`` (what a pod's ``spec.workloadRef{name, podGroup}`` points at), without
    a phase because that version has no status. 1.36 and later (v1alpha2 v0.36.0
    scheduling/v1alpha2/types.go:62-84; v1beta1 and v1alpha3 10b39a39 v1beta1/types.go:130-176,
    304-401): only templates; the gangs are PodGroup objects made from them (``records`` empty).
    ``spec.controllerRef`` names the job either way and counts as an owner name for the join.
    """

    namespace: str
    name: str
    controller: tuple[str, str] | None  # (kind, name)
    templates: tuple[Template, ...]
    records: list[PodGroupRecord]
    errors: list[str]


def _templates(raw: Any, where: str, parent: str, problems: Problems, out: list[Template], depth: int = 0) -> None:
    for i, t in enumerate(as_list(raw, where, problems)):
        w = f"{where}[{i}]"
        t = as_dict(t, w, problems)
        name = as_str(t.get("name"), f"{w}.name", problems)
        policy = as_dict(t.get("schedulingPolicy"), f"{w}.schedulingPolicy", problems)
        composite = where.endswith("compositePodGroupTemplates")
        gang = policy.get("gang")
        min_count = None
        if gang is not None:
            key = "minGroupCount" if composite else "minCount"
            min_count = as_int(as_dict(gang, f"{w}.schedulingPolicy.gang", problems).get(key), f"{w}.schedulingPolicy.gang.{key}", problems)
        if name:
            out.append(Template(name, composite, min_count, parent))
        if composite and depth < 8:  # the API allows depth 4 (v1beta1/types.go:126); a cycle cannot nest
            _templates(t.get("podGroupTemplates"), f"{w}.podGroupTemplates", name, problems, out, depth + 1)
            _templates(t.get("compositePodGroupTemplates"), f"{w}.compositePodGroupTemplates", name, problems, out, depth + 1)


def parse_native_workload(source: str, obj: Any) -> NativeWorkload:
    """A native Workload of any version (see :class:`NativeWorkload`); raises :class:`ParseError`
    for one with neither pod groups nor templates."""
    problems: Problems = []
    base = _metadata(source, "native", obj, problems)
    spec = as_dict(obj.get("spec"), "spec", problems)
    ctrl = as_dict(spec.get("controllerRef"), "spec.controllerRef", problems)
    owner_names = base.owner_names
    ctrl_name = as_str(ctrl.get("name"), "spec.controllerRef.name", problems)
    controller = None
    if ctrl_name:
        controller = (as_str(ctrl.get("kind"), "spec.controllerRef.kind", problems), ctrl_name)
        owner_names = (controller,) + owner_names
    records = []
    for i, g in enumerate(as_list(spec.get("podGroups"), "spec.podGroups", problems)):
        where = f"spec.podGroups[{i}]"
        if not isinstance(g, dict) or not isinstance(g.get("name"), str) or not g["name"]:
            problems.append(f"{where}: no name")
            continue
        records.append(PodGroupRecord(
            source=source, api="native", namespace=base.namespace, name=f"{base.name}/{g['name']}", uid=base.uid,
            created=base.created, owner_uids=base.owner_uids, owner_names=owner_names, workload_ref=base.name,
            min_member=_gang_min_count(as_dict(g.get("policy"), f"{where}.policy", problems), f"{where}.policy", problems),
        ))
    templates: list[Template] = []
    _templates(spec.get("podGroupTemplates"), "spec.podGroupTemplates", "", problems, templates)
    _templates(spec.get("compositePodGroupTemplates"), "spec.compositePodGroupTemplates", "", problems, templates)
    if not records and not templates:
        raise ParseError("; ".join(problems) or "spec has neither podGroups (1.35) nor podGroupTemplates (1.36+)")
    return NativeWorkload(base.namespace, base.name, controller, tuple(templates), records, problems)


Parser = Callable[[str, Any], list[PodGroupRecord]]

# Source name (exporter/kube/resources.py) -> parser returning the object's records.
PARSERS: dict[str, Parser] = {
    "podgroups_coscheduling": lambda s, o: [parse_coscheduling(s, o)],
    "podgroups_coscheduling_legacy": lambda s, o: [parse_coscheduling(s, o)],
    "podgroups_volcano": lambda s, o: [parse_volcano(s, o)],
    "podgroups_native": lambda s, o: [parse_native(s, o)],
    "compositepodgroups_native": lambda s, o: [parse_native_composite(s, o)],
    "podgroups_kai": lambda s, o: [parse_kai(s, o)],
    "workloads_native": lambda s, o: parse_native_workload(s, o).records,
}

# kind/apiVersion group of a dumped object -> source, for offline dumps (snapshot, explain).
SOURCE_BY_GROUP_KIND: dict[tuple[str, str], str] = {
    ("scheduling.x-k8s.io", "PodGroup"): "podgroups_coscheduling",
    ("scheduling.sigs.k8s.io", "PodGroup"): "podgroups_coscheduling_legacy",
    ("scheduling.volcano.sh", "PodGroup"): "podgroups_volcano",
    ("scheduling.k8s.io", "PodGroup"): "podgroups_native",
    ("scheduling.k8s.io", "Workload"): "workloads_native",
    ("scheduling.k8s.io", "CompositePodGroup"): "compositepodgroups_native",
    ("scheduling.run.ai", "PodGroup"): "podgroups_kai",
}


def source_of(obj: Mapping) -> str | None:
    """The PodGroup source a dumped object belongs to, from its apiVersion and kind (None: not ours)."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    return SOURCE_BY_GROUP_KIND.get((api_version.partition("/")[0], kind))


def settle_phase_since(rec: PodGroupRecord, previous: PodGroupRecord | None, now: float) -> None:
    """Fill ``phase_since`` for APIs without a condition for the phase.

    Same phase as before: keep the earlier start. A new phase: now (observed). First sight:
    the creation time when Pending (a group starts Pending), else a Volcano condition's latest
    transition when there is one, else now.
    """
    if rec.since_source == "condition" or rec.phase is None:
        return
    if previous is not None and previous.phase == rec.phase and previous.phase_since is not None:
        rec.phase_since, rec.since_source = previous.phase_since, previous.since_source
        return
    if previous is None:
        if rec.phase == "Pending" and rec.created is not None:
            rec.phase_since, rec.since_source = rec.created, "created"
            return
        times = [c.last_transition for c in rec.conditions if c.last_transition is not None]
        if times:
            rec.phase_since, rec.since_source = max(times), "condition"
            return
    rec.phase_since, rec.since_source = now, "observed"


def render(rec: PodGroupRecord, skip: frozenset[Family] = frozenset()) -> dict[Family, list[bytes]]:
    """The record's lines for the podgroup families but those in ``skip`` (--metric-denylist:
    never formatted): one escaped lead (namespace, podgroup, api) per record and cached phase
    tails, since this runs on every PodGroup event."""
    lead = label_pairs(_PG, (rec.namespace, rec.name, rec.api_label))
    out: dict[Family, list[bytes]] = {fam: [] for fam in FAMILIES}
    if rec.phase is not None and PODGROUP_PHASE not in skip:
        out[PODGROUP_PHASE] = [PODGROUP_PHASE.head(lead) + _phase_tail(rec.phase)]
    if rec.min_member is not None and PODGROUP_MIN_MEMBER not in skip:
        out[PODGROUP_MIN_MEMBER] = [PODGROUP_MIN_MEMBER.line(lead, rec.min_member)]
    if rec.running is not None and PODGROUP_PODS not in skip:
        out[PODGROUP_PODS] = [PODGROUP_PODS.lines(lead, [
            PODGROUP_PODS.tail(3, ("running",), rec.running),
            PODGROUP_PODS.tail(3, ("succeeded",), rec.succeeded or 0),
            PODGROUP_PODS.tail(3, ("failed",), rec.failed or 0),
        ])]
    if rec.phase_since is not None and PODGROUP_PHASE_TIMESTAMP not in skip:
        out[PODGROUP_PHASE_TIMESTAMP] = [PODGROUP_PHASE_TIMESTAMP.line(lead, rec.phase_since)]
    if PODGROUP_INFO not in skip:
        out[PODGROUP_INFO] = [PODGROUP_INFO.line(lead, 1, (
            rec.queue, rec.parent, rec.required_topology, rec.preferred_topology, "1" if rec.composite else "0"))]
    return out


@functools.lru_cache(maxsize=256)
def _phase_tail(phase: str) -> bytes:
    """The current phase's one series (value 1), an unknown phase too (it is counted as a parse
    problem, :func:`phase_errors`): a state set over every phase cost 8 series per group."""
    return PODGROUP_PHASE.tail(3, (phase,), 1)


def phase_errors(rec: PodGroupRecord) -> list[str]:
    """The record's field errors plus an unknown phase, everything the source's parse counter counts."""
    errs = list(rec.errors)
    if rec.phase is not None and rec.phase not in PHASES[rec.api]:
        errs.append(f"unknown {rec.api} phase {rec.phase!r}")
    return errs


def record_dict(rec: PodGroupRecord) -> dict[str, Any]:
    """The record for explain's JSON (stable keys)."""
    return {
        "api": rec.api, "namespace": rec.namespace, "name": rec.name, "phase": rec.phase,
        "gang_state": rec.gang_state, "phase_since": rec.phase_since, "phase_since_source": rec.since_source,
        "min_member": rec.min_member, "running": rec.running, "succeeded": rec.succeeded, "failed": rec.failed,
        "schedule_timeout_seconds": rec.schedule_timeout_seconds, "queue": rec.queue or None,
        "message": rec.message or None, "parent": rec.parent or None, "composite": rec.composite,
        "workload_ref": rec.workload_ref or None, "template": rec.template or None,
        "required_topology": rec.required_topology or None, "preferred_topology": rec.preferred_topology or None,
        "unschedulable": [{"reason": u.reason, "message": u.message} for u in rec.unschedulable],
        "subgroups": [{"name": g.name, "parent": g.parent or None, "min_member": g.min_member,
                       "min_subgroups": g.min_subgroups, "required_topology": g.required_topology or None,
                       "preferred_topology": g.preferred_topology or None} for g in rec.subgroups],
        "min_subgroups": rec.min_subgroups, "not_modelled": rec.not_modelled or None,
    }
