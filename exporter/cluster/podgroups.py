"""PodGroups of the three gang-scheduling APIs, parsed into one record shape, and their families.

A gang is "all of minMember pods bound, or none". Three APIs describe one, each with its own
words for the same few facts (research-gang.md):

* Coscheduling (scheduler-plugins) ``scheduling.x-k8s.io/v1alpha1`` and its pre-2023 group
  ``scheduling.sigs.k8s.io``: ``spec.minMember``, ``spec.scheduleTimeoutSeconds``,
  ``status.phase`` and pod counters, no conditions.
* Volcano ``scheduling.volcano.sh/v1beta1``: ``spec.minMember``, ``spec.queue``, ``status.phase``,
  pod counters and ``Unschedulable``/``Scheduled`` conditions with the scheduler's message.
* Native ``scheduling.k8s.io`` PodGroup (v1beta1, v1alpha3, v1alpha2): ``spec.schedulingPolicy.gang
  .minCount`` and the ``PodGroupScheduled``/``PodGroupInitiallyScheduled`` condition; no phase, no
  counters. The 1.35 ``v1alpha1`` Workload has no status at all: each ``spec.podGroups[]`` entry
  becomes a record without a phase, so it can still be joined and its minCount exported.

Native objects have no phase; their condition is mapped to one (``Pending``, ``Scheduled``,
``Unschedulable``, ``SchedulerError``) so one state set serves every API. Every record also says
which *gang state* its phase means (waiting, partial, assembled, finished, failed): that is what
the join in :mod:`exporter.cluster.gangs` reasons with, whatever the API.

A phase outside the API's list, or a field of the wrong type, is kept as what it is, exported,
and reported in ``errors`` for the caller to count in ``gangscope_parse_errors_total``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..exposition import Family, format_value
from ..exposition import escape_label_value as esc
from ..fields import ParseError, Problems, as_dict, as_int, as_list, as_str, parse_time

Api = Literal["coscheduling", "volcano", "native"]
GangState = Literal["waiting", "partial", "assembled", "finished", "failed", "unreported"]

COSCHEDULING_PODGROUP_LABEL = "scheduling.x-k8s.io/pod-group"
COSCHEDULING_LEGACY_PODGROUP_LABEL = "pod-group.scheduling.sigs.k8s.io"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"

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
    },
}

# How the phase timestamp was found: a condition's lastTransitionTime, the object's creation
# (a group is Pending from birth), or the time the collector saw the phase change.
SinceSource = Literal["condition", "created", "observed"]

PODGROUP_PHASE = Family(
    "gangscope_podgroup_phase", "gauge",
    "PodGroup phase as a state set over its API's phases (native: derived from the PodGroupScheduled condition).",
    ("namespace", "podgroup", "api", "phase"),
)
PODGROUP_MIN_MEMBER = Family(
    "gangscope_podgroup_min_member", "gauge",
    "Pods the gang needs bound together (minMember, or gang minCount for native groups).",
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
FAMILIES = (PODGROUP_PHASE, PODGROUP_MIN_MEMBER, PODGROUP_PODS, PODGROUP_PHASE_TIMESTAMP)


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition: float | None


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
    min_member: int | None = None
    schedule_timeout_seconds: int | None = None
    phase: str | None = None  # None: the API reports no status for this group
    running: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    queue: str = ""
    occupied_by: str = ""
    workload_ref: str = ""  # native: the scheduling.k8s.io Workload this group belongs to
    conditions: tuple[Condition, ...] = ()
    phase_since: float | None = None
    since_source: SinceSource = "observed"
    errors: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.source, self.namespace, self.name)

    @property
    def gang_state(self) -> GangState:
        """What the phase means for the gang; an unknown phase counts as still waiting."""
        if self.phase is None:
            return "unreported"
        return PHASES[self.api].get(self.phase, "waiting")

    @property
    def message(self) -> str:
        """The scheduler's own words on why the group is not placed, when the API carries them."""
        for cond in self.conditions:
            if cond.status == "False" and cond.type in ("PodGroupScheduled", "PodGroupInitiallyScheduled") and cond.message:
                return cond.message
            if cond.status == "True" and cond.type == "Unschedulable" and cond.message:
                return cond.message
        return ""


def _conditions(status: Mapping, problems: Problems) -> tuple[Condition, ...]:
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


def _metadata(source: str, api: Api, obj: Any, problems: Problems) -> PodGroupRecord:
    if not isinstance(obj, dict):
        raise ParseError("not an object")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ParseError("object has no metadata.name")
    uids: list[str] = []
    names: list[tuple[str, str]] = []
    refs = [r for r in as_list(meta.get("ownerReferences"), "metadata.ownerReferences", problems) if isinstance(r, dict)]
    # The controller owner first: it is the job a Kueue Workload is keyed on.
    for ref in sorted(refs, key=lambda r: not r.get("controller")):
        uid, name = ref.get("uid"), ref.get("name")
        if isinstance(uid, str) and uid:
            uids.append(uid)
        if isinstance(name, str) and name:
            names.append((str(ref.get("kind") or ""), name))
    created = as_str(meta.get("creationTimestamp"), "metadata.creationTimestamp", problems)
    return PodGroupRecord(
        source=source, api=api, namespace=as_str(meta.get("namespace"), "metadata.namespace", problems), name=meta["name"],
        uid=as_str(meta.get("uid"), "metadata.uid", problems), created=parse_time(created) if created else None,
        owner_uids=tuple(uids), owner_names=tuple(names),
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
    rec.phase = as_str(status.get("phase"), "status.phase", problems) or "Pending"
    _counters(rec, status, problems)
    rec.occupied_by = as_str(status.get("occupiedBy"), "status.occupiedBy", problems)
    rec.errors = problems
    return rec


def parse_volcano(source: str, obj: Any) -> PodGroupRecord:
    problems: Problems = []
    rec = _metadata(source, "volcano", obj, problems)
    spec, status = as_dict(obj.get("spec"), "spec", problems), as_dict(obj.get("status"), "status", problems)
    rec.min_member = as_int(spec.get("minMember"), "spec.minMember", problems)
    rec.queue = as_str(spec.get("queue"), "spec.queue", problems) or "default"
    rec.phase = as_str(status.get("phase"), "status.phase", problems) or "Pending"
    _counters(rec, status, problems)
    rec.conditions = _conditions(status, problems)
    rec.errors = problems
    return rec


def _gang_min_count(policy: dict, where: str, problems: Problems) -> int | None:
    gang = policy.get("gang")
    if gang is None:
        return None
    return as_int(as_dict(gang, f"{where}.gang", problems).get("minCount"), f"{where}.gang.minCount", problems)


def _native_phase(conditions: tuple[Condition, ...]) -> tuple[str, float | None]:
    """Phase from the scheduling condition; ``PodGroupInitiallyScheduled`` (1.37) stays True once set."""
    for ctype in ("PodGroupInitiallyScheduled", "PodGroupScheduled"):
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
    # v1beta1 spec.workloadRef{workloadName}; v1alpha2/3 spec.podGroupTemplateRef.workload{workloadName}.
    ref = as_dict(spec.get("workloadRef"), "spec.workloadRef", problems)
    if not ref:
        tref = as_dict(spec.get("podGroupTemplateRef"), "spec.podGroupTemplateRef", problems)
        ref = as_dict(tref.get("workload"), "spec.podGroupTemplateRef.workload", problems)
    rec.workload_ref = as_str(ref.get("workloadName"), "workloadName", problems)
    rec.conditions = _conditions(status, problems)
    rec.phase, since = _native_phase(rec.conditions)
    if since is not None:
        rec.phase_since, rec.since_source = since, "condition"
    rec.errors = problems
    return rec


def parse_native_workload(source: str, obj: Any) -> list[PodGroupRecord]:
    """The 1.35 ``scheduling.k8s.io/v1alpha1`` Workload: one record per ``spec.podGroups[]`` entry.

    Named ``<workload>/<podGroup>`` (what a pod's ``spec.workloadRef{name, podGroup}`` points at);
    ``spec.controllerRef`` names the job and counts as an owner; the record has no phase because
    this API version has no status.
    """
    problems: Problems = []
    base = _metadata(source, "native", obj, problems)
    spec = as_dict(obj.get("spec"), "spec", problems)
    ctrl = as_dict(spec.get("controllerRef"), "spec.controllerRef", problems)
    owner_names = base.owner_names
    ctrl_name = as_str(ctrl.get("name"), "spec.controllerRef.name", problems)
    if ctrl_name:
        owner_names = ((as_str(ctrl.get("kind"), "spec.controllerRef.kind", problems), ctrl_name),) + owner_names
    out = []
    for i, g in enumerate(as_list(spec.get("podGroups"), "spec.podGroups", problems)):
        where = f"spec.podGroups[{i}]"
        if not isinstance(g, dict) or not isinstance(g.get("name"), str) or not g["name"]:
            problems.append(f"{where}: no name")
            continue
        out.append(PodGroupRecord(
            source=source, api="native", namespace=base.namespace, name=f"{base.name}/{g['name']}", uid=base.uid,
            created=base.created, owner_uids=base.owner_uids, owner_names=owner_names, workload_ref=base.name,
            min_member=_gang_min_count(as_dict(g.get("policy"), f"{where}.policy", problems), f"{where}.policy", problems),
        ))
    if not out:
        raise ParseError("; ".join(problems) or "spec.podGroups is empty")
    out[0].errors = problems  # the object's problems, counted once
    return out


Parser = Callable[[str, Any], list[PodGroupRecord]]

# Source name (exporter/kube/resources.py) -> parser returning the object's records.
PARSERS: dict[str, Parser] = {
    "podgroups_coscheduling": lambda s, o: [parse_coscheduling(s, o)],
    "podgroups_coscheduling_legacy": lambda s, o: [parse_coscheduling(s, o)],
    "podgroups_volcano": lambda s, o: [parse_volcano(s, o)],
    "podgroups_native": lambda s, o: [parse_native(s, o)],
    "workloads_native": parse_native_workload,
}

# kind/apiVersion group of a dumped object -> source, for offline dumps (snapshot, explain).
SOURCE_BY_GROUP_KIND: dict[tuple[str, str], str] = {
    ("scheduling.x-k8s.io", "PodGroup"): "podgroups_coscheduling",
    ("scheduling.sigs.k8s.io", "PodGroup"): "podgroups_coscheduling_legacy",
    ("scheduling.volcano.sh", "PodGroup"): "podgroups_volcano",
    ("scheduling.k8s.io", "PodGroup"): "podgroups_native",
    ("scheduling.k8s.io", "Workload"): "workloads_native",
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


def render(rec: PodGroupRecord) -> dict[Family, list[str]]:
    """The record's lines for the four podgroup families.

    f-strings over one pre-escaped label prefix: this runs on every PodGroup event.
    """
    base = f'namespace="{esc(rec.namespace)}",podgroup="{esc(rec.name)}",api="{rec.api}"'
    out: dict[Family, list[str]] = {fam: [] for fam in FAMILIES}
    if rec.phase is not None:
        phases = PHASES[rec.api]
        name = PODGROUP_PHASE.name
        lines = [f'{name}{{{base},phase="{p}"}} {1 if p == rec.phase else 0}\n' for p in phases]
        if rec.phase not in phases:
            lines.append(f'{name}{{{base},phase="{esc(rec.phase)}"}} 1\n')
        out[PODGROUP_PHASE] = lines
    if rec.min_member is not None:
        out[PODGROUP_MIN_MEMBER] = [f"{PODGROUP_MIN_MEMBER.name}{{{base}}} {rec.min_member}\n"]
    if rec.running is not None:
        name = PODGROUP_PODS.name
        out[PODGROUP_PODS] = [
            f'{name}{{{base},state="running"}} {rec.running}\n',
            f'{name}{{{base},state="succeeded"}} {rec.succeeded or 0}\n',
            f'{name}{{{base},state="failed"}} {rec.failed or 0}\n',
        ]
    if rec.phase_since is not None:
        out[PODGROUP_PHASE_TIMESTAMP] = [f"{PODGROUP_PHASE_TIMESTAMP.name}{{{base}}} {format_value(rec.phase_since)}\n"]
    return out


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
        "message": rec.message or None,
    }
