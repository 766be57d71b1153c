"""The job around the gang: JobSets, Kubeflow TrainJobs and LeaderWorkerSets, joined to their Kueue Workload.

A gang is only understood with the job that owns it: a JobSet that keeps restarting re-assembles
its gangs every time, a TrainJob whose progress stopped holds its GPUs as surely as a partial
gang, and a LeaderWorkerSet group counts as ready before its workers are. Each is read from the
controller's own API and joined to its Kueue Workload through the owner chain (the Workload's
controller owner is the job; a TrainJob's JobSet is owned by the TrainJob).

* JobSet ``jobset.x-k8s.io/v1alpha2`` (kubernetes-sigs/jobset 08dfbdfd
  api/jobset/v1alpha2/jobset_types.go): ``status.restarts`` ("the number of times the restart
  action RestartJobSet or RestartJobSetAndIgnoreMaxRestarts have been executed", :211-213), per
  replicated job ``jobRestarts[]`` (individual Job restarts, :276-281), ``restartsCountTowardsMax``
  (:218), ``terminalState`` (:223), ``replicatedJobsStatus[]`` ready/succeeded/failed/active/suspended
  (:256-274), and conditions Completed, Failed, Suspended, ``RestartingJobSet``, StartupPolicy*
  (:101-116); the controller sets ``RestartingJobSet=True`` with reason ``FailurePolicy_<rule>`` or
  ``DefaultFailurePolicy`` when it recreates all Jobs (pkg/controllers/failure_policy.go:244-258,
  pkg/constants/constants.go:86-94) and False with ``JobsReady`` etc. once they are up.
  ``gangscope_job_restarts_total`` is ``restarts`` plus every ``jobRestarts`` entry, the way the
  controller's own ``totalRestartsCountTowardsMax`` sums its counters (failure_policy.go:546-550):
  object state, so every collector agrees and a restart reads as a counter increase. In-place
  restarts (the InPlaceRestart gate) add ``status.currentInPlaceRestartAttempt`` (:242-250): the
  attempt all pods have reached, 0 at creation (pkg/controllers/in_place_restart.go:78-90). (A
  ``status.totalRestarts`` field lived briefly on jobset's main branch and was removed by 4781968d,
  2026-03-10, before any release carried it.)
* TrainJob ``trainer.kubeflow.org/v1alpha1`` (kubeflow/trainer 8c0f5059
  pkg/apis/trainer/v1alpha1/trainjob_types.go): conditions Suspended, Complete, Failed (:58-64),
  ``jobsStatus[]`` (Trainer 2.1+, :513, :527-560), and ``trainerStatus`` (Trainer 2.2+ with the
  TrainJobStatus gate, :525, :565-592): ``progressPercentage`` 0-100, ``estimatedRemainingSeconds``,
  ``lastUpdatedTime`` (written by the training process through the status server,
  pkg/statusserver/server.go:239-263). ``gangscope_job_progress_changed_timestamp_seconds`` is when the
  reported progress last moved: the percentage, ``estimatedRemainingSeconds`` or ``metrics``
  (:584-600) changed (the ``lastUpdatedTime`` of the update that moved it, carried across updates
  that report the same; on first sight, the current ``lastUpdatedTime``). An integer percentage
  of a 12-day job moves every 3 hours while its remaining estimate and loss move at every report,
  so any of them counts as progress; a job that keeps reporting the same, or stopped reporting,
  grows stale by it.
* LeaderWorkerSet ``leaderworkerset.x-k8s.io/v1`` (kubernetes-sigs/lws 060ab4da
  api/leaderworkerset/v1/leaderworkerset_types.go): ``spec.replicas`` groups of
  ``leaderWorkerTemplate.size`` pods, ``status.readyReplicas``. LWS counts a group ready when its
  leader pod is ready and its worker StatefulSet is (pkg/controllers/leaderworkerset_controller.go:461);
  before lws 7a4e3c16 (2026-03, #705) the StatefulSet check compared ``spec.replicas`` with
  ``status.replicas`` (pods created, not ready), so a group counted ready from its leader alone.
  gangscope counts a group ready from its pods: every one of ``size`` pods running and ready.

Use::

    jobs = attach_jobs(store, gangs)          # gangs: exporter.cluster.gangs.GangIndex (its pods)
    jobs.handlers()                           # {"jobsets", "trainjobs", "leaderworkersets": handler}
    jobs.jobs_of(workload) -> [JobView]       # explain
    jobs.children_of(uid) / owners_of(uid)    # the owner chain (TrainJob -> JobSet) for pod joins
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..exposition import Family, label_pairs
from ..fields import Problems, as_dict, as_int, as_list, as_str, named_metadata, parse_time
from .podgroups import Condition, owner_refs, parse_conditions
from .pods import PodChanges, PodStore
from .record_handler import RecordHandler
from .store import ClusterStore
from . import job_state, training
from .workloads import Workload


class GangHost(Protocol):
    """What the job index needs of the gang index (exporter.cluster.gangs.GangIndex), without
    importing it: its pods, and a slot for the owner chain it reads back."""

    pods: PodStore | None
    jobs: Any

DEFAULT_PROGRESS_STALE = 1800.0
KINDS = {"jobsets": "JobSet", "trainjobs": "TrainJob", "leaderworkersets": "LeaderWorkerSet"}
# Conditions that end a job or hold it (JobSet jobset_types.go:106-110, TrainJob trainjob_types.go:58-64).
DONE_CONDITIONS = ("Completed", "Complete", "Failed")
CHILD_STATES = ("ready", "active", "succeeded", "failed", "suspended")

_JOB = ("namespace", "kind", "name")
JOB_INFO = Family(
    "gangscope_job_info", "info",
    "A job controller object (JobSet, TrainJob, LeaderWorkerSet) and the Kueue Workload it owns, through the owner "
    "chain (workload empty when none).",
    (*_JOB, "workload"),
)
JOB_CONDITION = Family(
    "gangscope_job_condition", "gauge",
    "One series per condition of the job (JobSet RestartingJobSet, Suspended, Completed, Failed, StartupPolicy*; "
    "TrainJob Suspended, Complete, Failed), with its status and reason.",
    (*_JOB, "type", "status", "reason"),
)
JOB_RESTARTS = Family(
    "gangscope_job_restarts_total", "counter",
    "Restarts of the JobSet: status.restarts (all Jobs recreated) plus every replicated job's jobRestarts "
    "(one Job recreated) plus currentInPlaceRestartAttempt (pods restarted in place), as the controller counts them.",
    _JOB,
)
JOB_CHILD_JOBS = Family(
    "gangscope_job_child_jobs", "gauge",
    "Child Jobs of a JobSet replicated job (replicatedJobsStatus) or of a TrainJob step (jobsStatus) by state: "
    "ready, active, succeeded, failed, suspended.",
    (*_JOB, "child", "state"),
)
JOB_PROGRESS = Family(
    "gangscope_job_progress_ratio", "gauge",
    "Training progress the job reports, 0 to 1 (TrainJob status.trainerStatus.progressPercentage / 100).",
    _JOB,
)
JOB_PROGRESS_UPDATED = Family(
    "gangscope_job_progress_updated_timestamp_seconds", "gauge",
    "When the training process last reported its progress (TrainJob status.trainerStatus.lastUpdatedTime).",
    _JOB,
)
JOB_PROGRESS_CHANGED = Family(
    "gangscope_job_progress_changed_timestamp_seconds", "gauge",
    "When the reported progress last moved: percentage, estimated remaining seconds or metrics (the lastUpdatedTime "
    "of the report that changed it; since the collector started).",
    _JOB,
)
JOB_PROGRESS_REMAINING = Family(
    "gangscope_job_progress_remaining_seconds", "gauge",
    "Training time the job estimates it still needs (TrainJob status.trainerStatus.estimatedRemainingSeconds).",
    _JOB,
)
JOB_GROUPS = Family(
    "gangscope_job_groups", "gauge",
    "LeaderWorkerSet groups by readiness judged from their pods (state ready: all size pods running and ready; "
    "not_ready: some pod missing or not ready; desired: spec.replicas).",
    (*_JOB, "state"),
)
JOB_GROUPS_REPORTED = Family(
    "gangscope_job_groups_reported_ready", "gauge",
    "LeaderWorkerSet groups its controller reports ready (status.readyReplicas), to compare with gangscope_job_groups.",
    _JOB,
)
FAMILIES = (JOB_INFO, JOB_CONDITION, JOB_RESTARTS, JOB_CHILD_JOBS, JOB_PROGRESS, JOB_PROGRESS_UPDATED,
            JOB_PROGRESS_CHANGED, JOB_PROGRESS_REMAINING, JOB_GROUPS, JOB_GROUPS_REPORTED, *training.FAMILIES)


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress-stale-after", type=float, default=DEFAULT_PROGRESS_STALE, metavar="SECONDS",
                   help="explain: a running job whose reported progress has not moved for this long holds its GPUs "
                        "without training (default 1800; the alert's own window is in alerts/config.yaml)")


@dataclass(frozen=True, slots=True)
class ChildJobs:
    """One replicated job's (JobSet) or step's (TrainJob) child Job counts."""

    name: str
    ready: int | None
    active: int | None
    succeeded: int | None
    failed: int | None
    suspended: int | None
    restarts: int = 0  # sum of jobRestarts (JobSet)


@dataclass(slots=True)
class JobRecord:
    kind: str
    namespace: str
    name: str
    uid: str = ""
    owner_uids: tuple[str, ...] = ()
    owner_names: tuple[tuple[str, str], ...] = ()
    conditions: tuple[Condition, ...] = ()
    suspend: bool = False
    restarts: int | None = None  # JobSet: status.restarts + sum of jobRestarts
    restarts_toward_max: int | None = None
    terminal_state: str = ""
    children: tuple[ChildJobs, ...] = ()
    progress: float | None = None  # 0..1
    remaining_seconds: int | None = None
    progress_updated: float | None = None
    progress_changed: float | None = None
    progress_metrics: tuple[tuple[str, str], ...] = ()  # TrainJob trainerStatus.metrics (name, value)
    replicas: int | None = None  # LWS spec.replicas
    size: int | None = None  # LWS leaderWorkerTemplate.size
    ready_replicas: int | None = None  # LWS status.readyReplicas
    trainer_metrics: tuple[tuple[str, float], ...] = ()  # TrainJob trainerStatus.metrics (exporter.cluster.training)
    errors: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.kind, self.name)

    def condition(self, ctype: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == ctype), None)

    @property
    def running(self) -> bool:
        """Not finished and not suspended (a suspended JobSet says Suspended=True; a TrainJob too)."""
        if self.suspend:
            return False
        return not any(c.status == "True" and c.type in (*DONE_CONDITIONS, "Suspended") for c in self.conditions)


def _start(kind: str, obj: Any) -> tuple[JobRecord, dict, dict, Problems]:
    """The record of an object's metadata and conditions, its spec and status, and the problem list."""
    problems: Problems = []
    meta = named_metadata(obj)
    uids, names = owner_refs(meta, problems)
    rec = JobRecord(kind, as_str(meta.get("namespace"), "metadata.namespace", problems), meta["name"],
                    as_str(meta.get("uid"), "metadata.uid", problems), uids, names)
    spec, status = as_dict(obj.get("spec"), "spec", problems), as_dict(obj.get("status"), "status", problems)
    rec.conditions = parse_conditions(status, problems)
    rec.suspend = spec.get("suspend") is True
    return rec, spec, status, problems


def _child(raw: Any, where: str, problems: Problems, restarts_key: str | None) -> ChildJobs | None:
    c = as_dict(raw, where, problems)
    name = as_str(c.get("name"), f"{where}.name", problems)
    if not name:
        return None
    restarts = 0
    if restarts_key:
        for i, n in enumerate(as_list(c.get(restarts_key), f"{where}.{restarts_key}", problems)):
            restarts += as_int(n, f"{where}.{restarts_key}[{i}]", problems, 0) or 0
    ready, active, succeeded, failed, suspended = (as_int(c.get(k), f"{where}.{k}", problems) for k in CHILD_STATES)
    return ChildJobs(name, ready, active, succeeded, failed, suspended, restarts)


def parse_jobset(obj: Any) -> JobRecord:
    rec, _, status, problems = _start("JobSet", obj)
    children = []
    for i, raw in enumerate(as_list(status.get("replicatedJobsStatus"), "status.replicatedJobsStatus", problems)):
        child = _child(raw, f"status.replicatedJobsStatus[{i}]", problems, "jobRestarts")
        if child is not None:
            children.append(child)
    rec.children = tuple(children)
    restarts = as_int(status.get("restarts"), "status.restarts", problems)
    if restarts is not None or children:
        rec.restarts = (restarts or 0) + sum(c.restarts for c in children)
    in_place = as_int(status.get("currentInPlaceRestartAttempt"), "status.currentInPlaceRestartAttempt", problems)
    if in_place is not None:
        rec.restarts = (rec.restarts or 0) + in_place
    rec.restarts_toward_max = as_int(status.get("restartsCountTowardsMax"), "status.restartsCountTowardsMax", problems)
    rec.terminal_state = as_str(status.get("terminalState"), "status.terminalState", problems)
    rec.errors = problems
    return rec


def parse_trainjob(obj: Any) -> JobRecord:
    rec, _, status, problems = _start("TrainJob", obj)
    rec.children = tuple(c for i, raw in enumerate(as_list(status.get("jobsStatus"), "status.jobsStatus", problems))
                         if (c := _child(raw, f"status.jobsStatus[{i}]", problems, None)) is not None)
    trainer = status.get("trainerStatus")
    if trainer is not None:
        trainer = as_dict(trainer, "status.trainerStatus", problems)
        pct = as_int(trainer.get("progressPercentage"), "status.trainerStatus.progressPercentage", problems)
        if pct is not None:
            if 0 <= pct <= 100:
                rec.progress = pct / 100
            else:
                problems.append(f"status.trainerStatus.progressPercentage: {pct} is outside 0-100")
        rec.remaining_seconds = as_int(trainer.get("estimatedRemainingSeconds"),
                                       "status.trainerStatus.estimatedRemainingSeconds", problems)
        metrics = []
        for i, m in enumerate(as_list(trainer.get("metrics"), "status.trainerStatus.metrics", problems)):
            m = as_dict(m, f"status.trainerStatus.metrics[{i}]", problems)
            metrics.append((as_str(m.get("name"), f"status.trainerStatus.metrics[{i}].name", problems),
                            as_str(m.get("value"), f"status.trainerStatus.metrics[{i}].value", problems)))
        rec.progress_metrics = tuple(metrics)
        updated = as_str(trainer.get("lastUpdatedTime"), "status.trainerStatus.lastUpdatedTime", problems)
        if updated:
            rec.progress_updated = parse_time(updated)
            if rec.progress_updated is None:
                problems.append(f"status.trainerStatus.lastUpdatedTime: not a time: {updated!r}")
        rec.trainer_metrics = training.parse_trainer_metrics(trainer, problems)
    rec.errors = problems
    return rec


def parse_leaderworkerset(obj: Any) -> JobRecord:
    rec, spec, status, problems = _start("LeaderWorkerSet", obj)
    rec.replicas = as_int(spec.get("replicas"), "spec.replicas", problems, 1)  # defaulted to 1 (leaderworkerset_types.go:124)
    rec.size = as_int(as_dict(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate", problems).get("size"),
                      "spec.leaderWorkerTemplate.size", problems, 1)
    rec.ready_replicas = as_int(status.get("readyReplicas"), "status.readyReplicas", problems, 0)
    rec.errors = problems
    return rec


PARSERS: dict[str, Callable[[Any], JobRecord]] = {
    "jobsets": parse_jobset, "trainjobs": parse_trainjob, "leaderworkersets": parse_leaderworkerset,
}
SOURCE_BY_GROUP_KIND = {
    ("jobset.x-k8s.io", "JobSet"): "jobsets",
    ("trainer.kubeflow.org", "TrainJob"): "trainjobs",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "leaderworkersets",
}


@dataclass(frozen=True, slots=True)
class Groups:
    """A LeaderWorkerSet's groups judged from their pods."""

    ready: int
    not_ready: int
    partial: tuple[tuple[str, int, int], ...]  # (group index, pods ready, size) of groups not ready


@dataclass(slots=True)
class JobView:
    """A job with what the collector knows around it (explain)."""

    record: JobRecord
    workloads: list[str]
    groups: Groups | None


class JobIndex:
    """Job records, their joins to Kueue Workloads, and their series (see the module docstring)."""

    def __init__(self, store: ClusterStore, pods: PodStore | None = None, clock: Callable[[], float] = time.time) -> None:
        self.store, self.pods, self.clock = store, pods, clock
        self.stale_after = DEFAULT_PROGRESS_STALE  # explain: how long progress may stand still
        self.exposition = store.exposition
        self.exposition.register(*FAMILIES)
        self._skip = self.exposition.filtered(FAMILIES)  # --metric-denylist
        self.jobs: dict[tuple[str, str, str], JobRecord] = {}
        self.kind_counts: dict[str, int] = {}  # kind -> its jobs held (each source's object count, per event)
        self._by_uid: dict[str, tuple[str, str, str]] = {}
        self._children: dict[str, set[str]] = {}  # owner uid -> uids of jobs it controls (TrainJob -> JobSet)
        self._handlers = {s: RecordHandler(s, KINDS[s], PARSERS[s], self.jobs, self.put, self.delete,
                                           kind_counts=self.kind_counts) for s in PARSERS}
        store.on_workload_change.append(self._workload_changed)
        if pods is not None:
            pods.on_change.append(self._pods_changed)

    def handlers(self) -> dict[str, RecordHandler[JobRecord]]:
        return dict(self._handlers)

    # ---- records
    def put(self, rec: JobRecord) -> None:
        previous = self.jobs.get(rec.key)
        if previous is not None:
            self._unindex(previous)
        if job_state.reports_progress(rec):
            moved = job_state.progress_moved(previous, rec)
            rec.progress_changed = (rec.progress_updated or self.clock()) if moved else previous.progress_changed  # type: ignore[union-attr]
        self.jobs[rec.key] = rec
        if previous is None:
            self.kind_counts[rec.key[1]] = self.kind_counts.get(rec.key[1], 0) + 1
        if rec.uid:
            self._by_uid[rec.uid] = rec.key
        if rec.uid and rec.owner_uids:
            self._children.setdefault(rec.owner_uids[0], set()).add(rec.uid)
        self._render(rec)

    def delete(self, key: tuple[str, str, str]) -> None:
        rec = self.jobs.pop(key, None)
        if rec is not None:
            self.kind_counts[key[1]] -= 1
            self._unindex(rec)
            self.exposition.delete(("job", *key))

    def _unindex(self, rec: JobRecord) -> None:
        if rec.uid:
            self._by_uid.pop(rec.uid, None)
            if rec.owner_uids:
                kids = self._children.get(rec.owner_uids[0])
                if kids is not None:
                    kids.discard(rec.uid)
                    if not kids:
                        del self._children[rec.owner_uids[0]]

    def children_of(self, uid: str) -> list[str]:
        """Uids of the jobs ``uid`` controls (a TrainJob's JobSet)."""
        return sorted(self._children.get(uid, ()))

    def owners_of(self, uid: str) -> list[str]:
        """The controller owner uid of the job with this uid (a JobSet's TrainJob), if it is a known job."""
        key = self._by_uid.get(uid)
        rec = self.jobs.get(key) if key is not None else None
        return list(rec.owner_uids[:1]) if rec is not None else []

    # ---- joins
    def workloads_of(self, rec: JobRecord) -> list[Workload]:
        """The Kueue Workloads the job owns, directly or through its controller owner (a TrainJob
        owns the Workload; its JobSet inherits it)."""
        found = {wl.key: wl for wl in self.store.workloads_by_owner_uid(rec.uid)} if rec.uid else {}
        if not found:
            for uid in rec.owner_uids[:1]:
                found.update((wl.key, wl) for wl in self.store.workloads_by_owner_uid(uid))
        return [found[k] for k in sorted(found) if found[k].namespace == rec.namespace]

    def jobs_of(self, wl: Workload) -> list[JobView]:
        """The jobs joined to a Workload: its owner, and the jobs its owner controls. The owner is
        the controller owner or the ``kueue.x-k8s.io/job-uid`` label: Kueue makes a
        LeaderWorkerSet's Workloads with that label and a non-controller owner reference (Kueue
        ff69552e pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go:350, 365)."""
        uids = [u for owner in sorted(ClusterStore.owner_uids(wl)) for u in (owner, *self.children_of(owner))]
        out = []
        for uid in uids:
            key = self._by_uid.get(uid)
            if key is not None and key in self.jobs:
                rec = self.jobs[key]
                out.append(JobView(rec, [w.name for w in self.workloads_of(rec)], self.groups(rec)))
        return out

    def groups(self, rec: JobRecord) -> Groups | None:
        """A LeaderWorkerSet's groups from its pods (None for other kinds, or without a pod store)."""
        if rec.kind != "LeaderWorkerSet" or self.pods is None:
            return None
        by_group: dict[str, list[Any]] = {}
        for p in self.pods.of_job(rec.namespace, "LeaderWorkerSet", rec.name):
            if p.job is not None:
                by_group.setdefault(p.job[2], []).append(p)
        ready = 0
        partial = []
        for group, pods in sorted(by_group.items()):
            size = max((p.job[3] for p in pods), default=0) or rec.size or 1
            ok = sum(1 for p in pods if p.phase == "Running" and p.ready)
            if ok >= size:
                ready += 1
            else:
                partial.append((group, ok, size))
        return Groups(ready, len(partial), tuple(partial))

    def _workload_changed(self, key: tuple[str, str]) -> None:
        wl = self.store.workloads.get(key)
        owners = sorted(ClusterStore.owner_uids(wl)) if wl is not None else []
        if not owners:
            # a deleted Workload: re-render the jobs that listed it
            for rec in self.jobs.values():
                if rec.namespace == key[0]:
                    self._render(rec)
            return
        for uid in (u for owner in owners for u in (owner, *self.children_of(owner))):
            job_key = self._by_uid.get(uid)
            if job_key is not None and job_key in self.jobs:
                self._render(self.jobs[job_key])

    def _pods_changed(self, changes: PodChanges) -> None:
        for ns, kind, name in changes.jobs:
            rec = self.jobs.get((ns, kind, name))
            if rec is not None and kind == "LeaderWorkerSet":
                self._render(rec)

    # ---- series
    def _render(self, rec: JobRecord) -> None:
        lead = label_pairs(_JOB, rec.key)
        skip = self._skip  # --metric-denylist: never formatted
        out: dict[Family, list[bytes]] = {}
        if JOB_INFO not in skip:
            workloads = [w.name for w in self.workloads_of(rec)] or [""]
            out[JOB_INFO] = [JOB_INFO.line(lead, 1, (w,)) for w in workloads]
        if JOB_CONDITION not in skip:
            out[JOB_CONDITION] = [JOB_CONDITION.line(lead, 1, (c.type, c.status, c.reason)) for c in rec.conditions if c.type]
        if rec.restarts is not None and JOB_RESTARTS not in skip:
            out[JOB_RESTARTS] = [JOB_RESTARTS.line(lead, rec.restarts)]
        if JOB_CHILD_JOBS not in skip:
            out[JOB_CHILD_JOBS] = [
                JOB_CHILD_JOBS.line(lead, getattr(c, s), (c.name, s))
                for c in rec.children for s in CHILD_STATES if getattr(c, s) is not None]
        for fam, v in ((JOB_PROGRESS, rec.progress), (JOB_PROGRESS_UPDATED, rec.progress_updated),
                       (JOB_PROGRESS_CHANGED, rec.progress_changed), (JOB_PROGRESS_REMAINING, rec.remaining_seconds)):
            if v is not None and fam not in skip:
                out[fam] = [fam.line(lead, v)]
        groups = self.groups(rec) if JOB_GROUPS not in skip else None
        if groups is not None:
            out[JOB_GROUPS] = [JOB_GROUPS.line(lead, groups.ready, ("ready",)),
                               JOB_GROUPS.line(lead, groups.not_ready, ("not_ready",)),
                               JOB_GROUPS.line(lead, rec.replicas or 0, ("desired",))]
        if rec.ready_replicas is not None and JOB_GROUPS_REPORTED not in skip:
            out[JOB_GROUPS_REPORTED] = [JOB_GROUPS_REPORTED.line(lead, rec.ready_replicas)]
        if rec.trainer_metrics and training.TRAINER_METRIC not in skip:
            out[training.TRAINER_METRIC] = training.metric_lines(lead, rec.trainer_metrics)
        self.exposition.set(("job", *rec.key), out)


def attach_jobs(store: ClusterStore, gangs: GangHost, clock: Callable[[], float] = time.time) -> JobIndex:
    """The job index of a process, hooked on ``store`` and the gang index's pods (which it gives
    the owner chain for joining pods to Workloads)."""
    jobs = JobIndex(store, gangs.pods, clock)
    gangs.jobs = jobs
    return jobs
