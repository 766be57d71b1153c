"""The gang judgement: a PodGroup, its members, the joined Workload and the clock -> the gang's stage.

A pure function of typed records (no store, no index): :mod:`exporter.cluster.gangs` keeps the
records and joins and calls :func:`evaluate`; the conformance tables of the schedulers' own tests
(tests/conformance/gangs/) drive it directly.

**Members as the schedulers count them.** A gang's pods split into

* ``gated``: still carrying scheduling gates (core/v1 ``spec.schedulingGates``): the scheduler does
  not look at them. Kueue's ``kueue.x-k8s.io/topology`` gate is placement (Kueue has not yet
  given the pods their topology domains), ``kueue.x-k8s.io/admission`` and
  ``kueue.x-k8s.io/elastic-job`` are admission (Kueue ff69552e pkg/podset/podset.go:67-77,
  apis/kueue/v1beta2/constants.go:27, pkg/controller/jobs/pod/constants/constants.go:24); any other
  gate is someone else's, named and judged ``unknown``;
* ``pending``: not bound, no gate: the scheduler is trying;
* ``bound``: a node assigned, containers not all started (the kubelet keeps the pod ``Pending``
  while it pulls images or runs init containers), with the waiting containers' reason;
* ``running``, ``succeeded``, ``failed``;
* ``terminating``: ``metadata.deletionTimestamp`` set: it still holds its node's GPUs but is leaving
  (a JobSet restart, a preemption), so it is not a member;
* ``unknown``: a phase outside core/v1's five (bad input, counted by the pod handler).

**Assembly is the scheduler's.** The gang is placed when its bound, running and succeeded members
reach its minimum, which is what each scheduler waits for: Coscheduling's
``scheduleTimeoutSeconds`` is the Permit wait for siblings before any pod binds (scheduler-plugins
903da7df pkg/coscheduling/coscheduling.go:217-251, core/core.go:308-330 counts assigned pods);
Volcano's ``Running`` counts scheduled (bound) tasks (volcano ed72c7c8
pkg/scheduler/framework/session.go:580-609, getPodGroupPhase); KAI evicts a gang whose allocated
pods stay below its minimum for its staleness grace period (NVIDIA/KAI-Scheduler
72de64fc8eca10fa8cca26a20156178f3edbe092 pkg/scheduler/actions/stalegangeviction/
stalegangeviction.go:41-56; "72de64fc" below). A placed gang whose members
have not all started is ``starting``: a node or image matter, not an assembly one (no stuck
deadline; its own alert only if it lasts). It is ``assembled`` once running and succeeded members
reach the minimum, as the Coscheduling controller calls ``Running``
(pkg/controllers/podgroup_controller.go:118-136).

The stages (``GANG_STAGES``):

* ``not_admitted``: the joined Workload is not admitted, or Kueue's admission gates hold the pods;
* ``queued``: a Volcano group ``Pending`` (or ``Inqueue`` with no pod yet) waits for its queue:
  Volcano creates a job's pods only after ``Pending -> Inqueue``
  (pkg/controllers/job/job_controller_actions.go:410-412), and enqueues a group only when its
  ``minResources`` fit the queue (pkg/scheduler/actions/enqueue/enqueue.go:95-98);
* ``placing``: Kueue's topology gate holds the pods (TAS has not assigned them yet);
* ``assembling``, ``stuck`` (past the timeout), ``partially_bound`` (some bound, the rest cannot be
  placed): waiting for the scheduler, the window counting from the group's creation, the
  Workload's admission, the gang's fall back below its minimum, or its last gate going, whichever
  is latest;
* ``starting``: placed, not all members started;
* ``scaling``: a native gang whose ``minCount`` rose while it ran: "does not affect already
  scheduled pods" (kubernetes 10b39a39 staging/src/k8s.io/api/scheduling/v1beta1/types.go:444-460);
* ``initially_scheduled``: only the native condition speaks, and it reflects the first scheduling
  decision only (v1beta1/types.go:722-750);
* ``assembled``, ``finished``, ``failed``;
* ``unreported``: no status and no pods to judge by;
* ``empty``: its pods are watched and none exists, and no admitted Workload waits for it;
* ``unknown``: what decides the stage is input gangscope does not know (a pod phase, a gate) or a
  rule it does not model (a Volcano ``subGroupPolicy``: the scheduler splits the members by pod
  labels gangscope does not keep; its phase alone, without members, still speaks).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from . import podgroups as pg
from .podgroups import PodGroupRecord
from .pods import KAI_ANNOTATION, Pod
from .workloads import Workload

Via = Literal["template", "owner_uid", "owner_name"]
Evidence = Literal["pods", "counters", "children", "phase"]

GANG_STAGES = ("not_admitted", "queued", "placing", "assembling", "stuck", "partially_bound", "starting", "scaling",
               "initially_scheduled", "assembled", "finished", "failed", "unreported", "empty", "unknown")
# Stages with an assembly deadline: the scheduler is trying and the timeout applies.
WAITING_STAGES = ("assembling", "stuck", "partially_bound")
# Stages whose placed members' GPUs train nothing (scaling: only the new members', see evaluate).
IDLE_STAGES = (*WAITING_STAGES, "starting", "scaling")
# Stages after which waiting again restarts the window (a gang that lost a member, pods that
# appeared for a group that had none); not "unreported": better evidence arriving (the pods'
# first LIST) is not a change of the gang.
REGRESSED_FROM = ("assembled", "finished", "failed", "empty", "queued", "starting", "scaling", "initially_scheduled")
# What a gang stage says about its Workload's pods: still assembling (True), all placed (False),
# nothing (absent: not admitted yet, a group without status or pods, input not understood).
PODS_ASSEMBLING = {"queued": True, "placing": True, "assembling": True, "stuck": True, "partially_bound": True,
                   "starting": True, "scaling": False, "initially_scheduled": False, "assembled": False,
                   "finished": False, "failed": False}

# Kueue's scheduling gates (Kueue ff69552e apis/kueue/v1beta2/topology_types.go:75, constants.go:27,
# pkg/controller/jobs/pod/constants/constants.go:24; set by pkg/podset/podset.go:67-77).
PLACEMENT_GATES = ("kueue.x-k8s.io/topology",)
ADMISSION_GATES = ("kueue.x-k8s.io/admission", "kueue.x-k8s.io/elastic-job")
# The kubelet's reasons for a waiting container, exported as the idle GPUs' reason label as they
# are; any other is "other" (the label stays bounded). "members": a running pod waiting for the
# rest of its gang; "starting": bound, the kubelet reported no reason yet.
WAITING_REASONS = ("ContainerCreating", "PodInitializing", "ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff",
                   "CreateContainerConfigError", "CreateContainerError", "InvalidImageName", "RunContainerError")
KAI_DEFAULT_STALENESS_GRACE = 60.0  # KAI-Scheduler 72de64fc cmd/scheduler/app/options/options.go:34

TEMPLATE_LABELS = (
    (pg.COSCHEDULING_PODGROUP_LABEL, "coscheduling"),
    (pg.COSCHEDULING_LEGACY_PODGROUP_LABEL, "coscheduling_legacy"),
)
TEMPLATE_ANNOTATIONS = ((pg.VOLCANO_GROUP_ANNOTATION, "volcano"), (KAI_ANNOTATION, "kai"))


def template_refs(wl: Workload) -> list[tuple[str, str, float]]:
    """(api, podgroup name, GPUs per pod) for every pod template of ``wl`` that names a group."""
    out = []
    for ps in wl.podsets:
        for key, api in TEMPLATE_LABELS:
            if ps.labels.get(key):
                out.append((api, ps.labels[key], ps.gpus_per_pod))
        for key, api in TEMPLATE_ANNOTATIONS:
            if ps.annotations.get(key):
                out.append((api, ps.annotations[key], ps.gpus_per_pod))
        if ps.scheduling_group:
            out.append(("native", ps.scheduling_group, ps.gpus_per_pod))
    return out


def gpus_per_pod(wl: Workload, rec: PodGroupRecord, via: Via | None) -> float | None:
    """Per-pod GPUs of the group's pods: the template that names it, else the pod sets' common
    value, else the smallest (idle GPUs are then a lower bound)."""
    if via == "template":
        named = [g for api, name, g in template_refs(wl) if api == rec.api_label and name == rec.name]
        if named:
            return named[0]
    values = {ps.gpus_per_pod for ps in wl.podsets if ps.count > 0}
    return min(values) if values else None


@dataclass(frozen=True, slots=True)
class Members:
    """A gang's members by state, and by which evidence (None: not reported by that evidence)."""

    evidence: Evidence
    running: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    bound: int | None = None  # on a node, containers not all started
    ready: int | None = None
    pending: int | None = None  # not bound, no gate
    gated: int | None = None
    terminating: int | None = None  # deletionTimestamp set: not members, but they hold GPUs
    unknown: int | None = None  # a phase outside core/v1's
    members: int | None = None  # everything but the terminating
    placed_gpus: float | None = None  # GPUs of the bound and running members
    terminating_gpus: float | None = None
    idle: tuple[tuple[str, float], ...] = ()  # (reason, GPUs) of the placed members, should the gang be idle
    gates: tuple[tuple[str, int], ...] = ()  # (gate, pods) of the gated members
    waiting: tuple[tuple[str, int], ...] = ()  # (reason, pods) of the bound members' waiting containers
    disrupted: tuple[tuple[str, int], ...] = ()  # (DisruptionTarget reason, pods)
    unknown_what: tuple[str, ...] = ()  # what gangscope did not understand (a phase, a gate)
    reached: bool | None = None  # running and succeeded meet the minimum (None: no minimum to judge by)
    placed: bool | None = None  # bound, running and succeeded meet it: the scheduler's own count
    gpus_unknown: int = 0  # placed members whose GPUs are not in the pod (DRA claims, KAI gpu-memory)


def _meets(rec: PodGroupRecord, per: dict[str, int], total: int, keys: set[str]) -> bool | None:
    """Whether ``total`` members (``per`` by sub-group, task or replica; ``keys`` every one the
    members name) satisfy the group."""
    if rec.subgroups:
        return subgroups_satisfied(rec, per, total)
    if rec.min_member is None:
        return None
    if rec.api == "native" and any(keys):
        # 1.35 replicas of one pod group (podGroupReplicaKey, "" the unkeyed one): each is a gang
        # of minCount (kubernetes 57923d93 pkg/scheduler/framework/plugins/gangscheduling/
        # gangscheduling_test.go TestGangSchedulingFlow: p5 of replica "2" is not p1's sibling)
        return all(per.get(k, 0) >= rec.min_member for k in keys)
    if rec.min_task_member:
        # Volcano: the job's minimum and each task's (pkg/scheduler/api/job_info.go:426, plugins/gang)
        return total >= rec.min_member and all(per.get(task, 0) >= n for task, n in rec.min_task_member)
    return total >= rec.min_member


def subgroups_satisfied(rec: PodGroupRecord, done: dict[str, int], total: int) -> bool:
    """A KAI PodGroup's sub-group tree against members per sub-group (``done``)."""
    children: dict[str, list[pg.SubGroup]] = {}
    for g in rec.subgroups:
        children.setdefault(g.parent, []).append(g)

    def enough(kids: list[pg.SubGroup], k: int | None, seen: frozenset[str]) -> bool:
        ok = sum(1 for g in kids if satisfied(g, seen))
        return ok >= (k if k is not None else len(kids))

    def satisfied(g: pg.SubGroup, seen: frozenset[str]) -> bool:
        if g.name in seen:
            return False
        kids = children.get(g.name)
        if not kids:
            return done.get(g.name, 0) >= (g.min_member or 0)
        return enough(kids, g.min_subgroups, seen | {g.name})

    roots = children.get("", [])
    if rec.min_subgroups is not None or not rec.min_member:
        return enough(roots, rec.min_subgroups, frozenset())
    return total >= rec.min_member and enough(roots, None, frozenset())


def _gate_kind(gate: str) -> str:
    if gate in ADMISSION_GATES:
        return "admission"
    if gate in PLACEMENT_GATES:
        return "placement"
    return "other"


def pod_members(rec: PodGroupRecord, pods: Iterable[Pod]) -> Members:
    """The gang's members from its live pods, as its scheduler counts them (module docstring).

    This runs at every event of a gang's pods: the common states are counted inline, and members
    per sub-group, task or replica only where the group has parts."""
    running = succeeded = failed = bound = ready = pending = gated = terminating = unknown = members = 0
    gpus_unknown = 0
    placed_gpus = terminating_gpus = running_gpus = 0.0
    idle: dict[str, float] = {}
    gates: dict[str, int] = {}
    waiting: dict[str, int] = {}
    disrupted: dict[str, int] = {}
    unknown_what: set[str] = set()
    parts = bool(rec.subgroups or rec.min_task_member or rec.api == "native")
    done: dict[str, int] = {}
    placed: dict[str, int] = {}
    keys: set[str] = set()
    for p in pods:
        phase = p.phase
        if p.terminating and phase != "Succeeded" and phase != "Failed":
            terminating += 1
            if p.node:
                terminating_gpus += p.gpus
            continue
        members += 1
        sub = p.gang[2] if parts and p.gang is not None else ""
        if parts:
            keys.add(sub)
        if p.disrupted:
            disrupted[p.disrupted] = disrupted.get(p.disrupted, 0) + 1
        if phase == "Running":  # the kubelet's word: on a node by definition
            running += 1
            ready += p.ready
            placed_gpus += p.gpus
            running_gpus += p.gpus
            gpus_unknown += p.gpus_unknown
            if parts:
                done[sub] = done.get(sub, 0) + 1
                placed[sub] = placed.get(sub, 0) + 1
        elif phase == "Succeeded":
            succeeded += 1
            if parts:
                done[sub] = done.get(sub, 0) + 1
                placed[sub] = placed.get(sub, 0) + 1
        elif phase == "Failed":
            failed += 1
        elif phase != "Pending":
            unknown += 1  # core/v1 Unknown: the node lost touch; anything else: bad input
            unknown_what.add(f"pod phase {phase}")
        elif p.node:
            bound += 1
            placed_gpus += p.gpus
            gpus_unknown += p.gpus_unknown
            if parts:
                placed[sub] = placed.get(sub, 0) + 1
            reason = p.waiting or "starting"
            waiting[reason] = waiting.get(reason, 0) + 1
            label = reason if reason in WAITING_REASONS or reason == "starting" else "other"
            idle[label] = idle.get(label, 0.0) + p.gpus
        elif p.gates:
            gated += 1
            for g in p.gates:
                gates[g] = gates.get(g, 0) + 1
                if _gate_kind(g) == "other":
                    unknown_what.add(f"scheduling gate {g}")
        else:
            pending += 1
    if running_gpus:
        idle["members"] = running_gpus
    if not parts:
        done[""] = running + succeeded
        placed[""] = running + succeeded + bound
    return Members(
        "pods", running, succeeded, failed, bound, ready, pending, gated, terminating, unknown, members, placed_gpus,
        terminating_gpus, tuple(sorted((k, v) for k, v in idle.items() if v)) if idle else (), _items(gates),
        _items(waiting), _items(disrupted), tuple(sorted(unknown_what)) if unknown_what else (),
        _meets(rec, done, running + succeeded, keys), _meets(rec, placed, running + succeeded + bound, keys),
        gpus_unknown)


def _items(counts: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """Counts by name in name order (most gangs have none: no sort then)."""
    return tuple(sorted(counts.items())) if counts else ()


_NO_GROUP = PodGroupRecord("", "coscheduling", "", "")


def workload_members(pods: Iterable[Pod]) -> Members:
    """A Kueue Workload's own pods by state (no gang minimum: ``reached`` and ``placed`` are None)."""
    return pod_members(_NO_GROUP, pods)


def counter_members(rec: PodGroupRecord) -> Members | None:
    """The gang's members from the PodGroup's counters (Coscheduling, Volcano), if it has them."""
    if rec.running is None:
        return None
    done = rec.running + (rec.succeeded or 0)
    return Members("counters", rec.running, rec.succeeded or 0, rec.failed or 0,
                   reached=None if rec.min_member is None else done >= rec.min_member)


def children_members(rec: PodGroupRecord, kids: list[Gang]) -> Members:
    """A native CompositePodGroup's members: its child groups, assembled when ``minGroupCount`` of
    them are (all of them without a gang policy, kubernetes 10b39a39 v1alpha3/types.go:1339-1347)."""
    done = sum(1 for g in kids if g.stage in ("assembled", "finished", "scaling"))
    starting = sum(1 for g in kids if g.stage == "starting")
    partial = sum(1 for g in kids if g.stage == "partially_bound")
    need = rec.min_member if rec.min_member is not None else len(kids)
    # A child still waiting counts its own idle GPUs; those of a placed child wait for its siblings.
    idle = sum((g.members.placed_gpus or 0.0) - sum(gpus for _, gpus in g.idle)
               for g in kids if g.stage in ("assembled", "scaling") and g.members is not None)
    placed_gpus = sum(g.members.placed_gpus or 0.0 for g in kids if g.members is not None)
    return Members("children", done + partial, 0, 0, bound=starting, members=len(kids), placed_gpus=placed_gpus,
                   idle=(("members", idle),) if idle else (), reached=bool(kids) and done >= need,
                   placed=bool(kids) and done + starting >= need)


def gang_state(rec: PodGroupRecord, m: Members | None) -> str:
    """The gang's state before the Workload's admission and the clock are considered: waiting,
    partial, starting, assembled, finished, failed, unreported, empty, queued, placement,
    admission, initially_scheduled or unknown, from the best evidence."""
    phase_state = rec.gang_state
    volcano_unqueued = rec.api == "volcano" and rec.phase == "Pending"
    if m is None or m.evidence == "phase":
        if rec.api == "native" and phase_state == "assembled":
            return "initially_scheduled"
        if rec.api == "kai":
            # KAI writes last-start-timestamp when it allocates the whole gang and
            # stale-podgroup-timestamp while allocated pods stay below the minimum
            # (pkg/scheduler/api/podgroup_info/job_info.go:174-193, actions/allocate/allocate.go:113-116,
            # cache/status_updater/default_status_updater.go:378-380).
            if rec.stale_since is not None:
                return "partial"
            if rec.last_start is not None and phase_state != "waiting":
                return "assembled"
        return "queued" if volcano_unqueued else phase_state
    if m.evidence == "pods" and m.members == 0:
        if phase_state in ("finished", "failed"):
            return phase_state
        return "queued" if rec.api == "volcano" and rec.phase in ("Pending", "Inqueue") else "empty"
    if rec.not_modelled:
        # Members counted against a minimum whose parts gangscope cannot split (a Volcano
        # subGroupPolicy): only the scheduler's own terminal or pending word stands.
        if phase_state in ("finished", "failed"):
            return phase_state
        if volcano_unqueued and not (m.running or m.succeeded or m.failed or m.bound):
            return "queued"
        return "unknown"
    if m.reached is None:
        return phase_state
    minimum = rec.min_member or 0
    succeeded, failed, running = m.succeeded or 0, m.failed or 0, m.running or 0
    if m.evidence == "counters":
        # The Coscheduling controller's own order (podgroup_controller.go:118-136).
        if minimum and succeeded >= minimum:
            return "finished"
        if failed and failed + running + succeeded >= minimum:
            return "failed"
        if m.reached:
            return "assembled"
        if phase_state == "assembled":
            # Volcano's Running counts scheduled (bound) tasks, its counter running ones, both
            # written in one session (session.go:580-609, 629): bound, not all started.
            return "starting" if rec.api == "volcano" else "assembled"
        if phase_state in ("finished", "failed", "unknown"):
            return phase_state
        if volcano_unqueued and not (running or succeeded or failed):
            return "queued"
        return "partial" if running or phase_state == "partial" else "waiting"
    if m.reached:
        if m.evidence == "pods" and minimum and succeeded >= minimum and not (m.bound or running):
            return "finished"
        return "assembled"
    if m.placed:
        return "starting"
    if m.unknown:
        return "unknown"
    if phase_state in ("finished", "failed"):
        return phase_state  # the scheduler's terminal word, and the members are below the minimum
    if m.evidence == "pods":
        if failed and rec.api == "coscheduling" and minimum and failed + running + succeeded >= minimum:
            return "failed"  # the controller's Failed (podgroup_controller.go:128-131), below the minimum
        if m.gated and (m.members or 0) - m.gated - failed < minimum:
            # Gated members hold the gang only when the others cannot reach its minimum
            # (Coscheduling PreFilter, scheduler-plugins 903da7df pkg/coscheduling/core/core.go:262-276).
            kinds = {_gate_kind(g) for g, _ in m.gates}
            return "admission" if "admission" in kinds else "placement" if "placement" in kinds else "unknown"
        return "partial" if (m.bound or 0) + running else "waiting"
    return "partial" if running else "waiting"


@dataclass(slots=True)
class Gang:
    """One PodGroup with its joined Workload (or none) and its evaluated stage."""

    podgroup: PodGroupRecord
    workload: Workload | None
    via: Via | None
    stage: str
    stuck: bool
    wait_start: float | None
    deadline: float | None
    timeout: float
    gpus_per_pod: float | None
    idle_gpus: float | None
    members: Members | None = None
    regressed_at: float | None = None  # when it last fell from a non-waiting stage back to waiting
    idle: tuple[tuple[str, float], ...] = ()  # idle GPUs by reason (sums to idle_gpus)
    ungated_at: float | None = None  # when its last scheduling gate was seen to go
    scaled_from: int | None = None  # scaling: the minCount it ran with before it rose

    def as_dict(self) -> dict[str, Any]:
        m = self.members
        return {
            "podgroup": pg.record_dict(self.podgroup),
            "workload": self.workload.name if self.workload else None,
            "join_key": self.via, "stage": self.stage, "stuck": self.stuck, "wait_start": self.wait_start,
            "deadline": self.deadline, "timeout_seconds": self.timeout, "gpus_per_pod": self.gpus_per_pod,
            "idle_gpus": self.idle_gpus, "idle_by_reason": dict(self.idle), "scaled_from": self.scaled_from,
            "evidence": m.evidence if m is not None else "phase",
            "members": None if m is None or m.evidence == "phase" else {
                "running": m.running, "succeeded": m.succeeded, "failed": m.failed, "bound": m.bound, "ready": m.ready,
                "pending": m.pending, "gated": m.gated, "terminating": m.terminating, "unknown": m.unknown,
                "total": m.members, "placed_gpus": m.placed_gpus, "terminating_gpus": m.terminating_gpus,
                "gates": dict(m.gates), "waiting": dict(m.waiting), "disrupted": dict(m.disrupted),
                "gpus_unknown": m.gpus_unknown,
                "not_understood": list(m.unknown_what)},
        }


def _evidence(m: Members | None) -> str:
    return m.evidence if m is not None else "phase"


def evaluate(rec: PodGroupRecord, wl: Workload | None, via: Via | None, now: float, default_timeout: float,
             members: Members | None = None, previous: Gang | None = None,
             kai_grace: float = KAI_DEFAULT_STALENESS_GRACE) -> Gang:
    """The gang's stage, stuck flag, deadline and idle GPUs at ``now``.

    ``members`` is the best evidence (None: the group's counters, else its phase); ``previous``
    the gang's last evaluation (when it fell back below its minimum, lost its last gate, or ran
    before its minCount rose); ``kai_grace`` KAI's staleness grace period."""
    if members is None:
        members = counter_members(rec)
    state = gang_state(rec, members)
    timeout = float(rec.schedule_timeout_seconds) if rec.schedule_timeout_seconds else default_timeout
    admitted_at = None
    not_admitted = False
    admitted = False
    if wl is not None:
        adm = wl.conditions.get("Admitted")
        finished = wl.condition_true("Finished")
        if adm is not None and adm.status == "True":
            admitted_at, admitted = adm.last_transition_seconds, not finished
        elif not finished:
            not_admitted = True
    if state == "empty" and admitted:
        state = "waiting"  # Kueue admitted the job: its pods are due
    scaled_from = None
    if (rec.api == "native" and previous is not None and members is not None and members.evidence == "pods"
            and state in ("waiting", "partial", "starting") and rec.min_member is not None):
        base = (previous.scaled_from if previous.stage == "scaling"
                else previous.podgroup.min_member if previous.stage == "assembled" else None)
        if base is not None and rec.min_member > base and (members.running or 0) + (members.succeeded or 0) >= base:
            state, scaled_from = "scaling", base
    regressed_at = previous.regressed_at if previous is not None else None
    if (state in ("waiting", "partial") and previous is not None and previous.stage in REGRESSED_FROM
            and _evidence(previous.members) == _evidence(members) and previous.members != members):
        # It was placed (or had nothing to place) and now waits again, because its members
        # changed by the same evidence. Better evidence arriving (the pods' first LIST after the
        # PodGroup's counters) or the Workload joined after its pods says nothing fell back: "now"
        # would be the moment this process listed, which differs between replicas and shards; the
        # window then runs from the objects' own times.
        regressed_at = now
    ungated_at = previous.ungated_at if previous is not None else None
    if (previous is not None and previous.members is not None and previous.members.gated
            and members is not None and members.evidence == "pods" and not members.gated):
        ungated_at = now  # the last gate went: the scheduler starts now (no object records when)
    starts = [t for t in (rec.created, admitted_at, regressed_at, ungated_at) if t is not None]
    wait_start = max(starts) if starts else None
    deadline = stuck = None
    if state in ("waiting", "partial") and not not_admitted:
        if rec.api == "kai" and rec.stale_since is not None and kai_grace >= 0:
            deadline = rec.stale_since + kai_grace  # KAI evicts the gang then (stalegangeviction.go:41-56)
        else:
            deadline = wait_start + timeout if wait_start is not None else None
        stuck = deadline is not None and now >= deadline
    if state in ("assembled", "finished", "failed", "unreported", "initially_scheduled", "starting", "scaling",
                 "unknown"):
        stage = state
    elif not_admitted or state == "admission":
        stage = "not_admitted"
    elif state in ("empty", "queued"):
        stage = state
    elif state == "placement":
        stage = "placing"
    elif state == "partial":
        stage = "partially_bound"
    else:
        stage = "stuck" if stuck else "assembling"
    per_pod = gpus_per_pod(wl, rec, via) if wl is not None else None
    idle: tuple[tuple[str, float], ...] = ()
    idle_gpus = None
    if members is not None and members.evidence in ("pods", "children"):
        if stage == "scaling":
            idle = tuple((r, g) for r, g in members.idle if r != "members")
        elif stage in IDLE_STAGES:
            idle = members.idle
        idle_gpus = sum(g for _, g in idle)
    elif per_pod is not None and members is not None and members.evidence == "counters":
        idle_gpus = (members.running or 0) * per_pod if stage == "partially_bound" else 0.0
        idle = (("members", idle_gpus),) if idle_gpus else ()
    return Gang(rec, wl, via, stage, bool(stuck), wait_start, deadline, timeout, per_pod, idle_gpus, members,
                regressed_at, idle, ungated_at, scaled_from)
