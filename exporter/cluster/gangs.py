"""Gangs: PodGroups joined to Kueue Workloads, assembly judged from the best evidence, and their series.

How to attach (collector main, snapshot, explain)::

    gangs = attach_gangs(store, assembly_timeout=600.0, pods=pod_store)   # store: ClusterStore;
                                  # pods: exporter.cluster.pods.PodStore (None: PodGroup status only)
    handlers = gangs.handlers()   # {source: PodGroupHandler}, the sources podgroups_coscheduling,
                                  # podgroups_coscheduling_legacy, podgroups_volcano, podgroups_native,
                                  # compositepodgroups_native, podgroups_kai, workloads_native
                                  # (exporter.kube.resources); replace(objects) / apply(event_type, obj);
                                  # set handlers[s].health = SourceHealth(...) to count parse errors
    gangs.start_timers()          # once, inside the collector's event loop (stuck-assembly deadlines,
                                  # the idle GPU-seconds counter's tick)
    gangs.gangs_of((ns, workload)) / gangs.find_podgroups(ns, name) -> [Gang]   # explain

It registers itself on ``store.on_workload_change`` and ``pods.on_change``, so a Workload event
re-resolves the joins its keys reach, a PodGroup event re-resolves that group, and a pod event
re-judges the gangs, Workloads and composite parents whose pods changed. Offline users
(snapshot, explain) need no timers: every gang is evaluated at the clock of its last change,
``reevaluate()`` re-checks all of them at the current time.

Join keys (ARCHITECTURE.md), in that order of trust:

1. ``template``: a pod template of the Workload names the group (label
   ``scheduling.x-k8s.io/pod-group``, legacy ``pod-group.scheduling.sigs.k8s.io``, Volcano
   annotation ``scheduling.k8s.io/group-name``, KAI annotation ``pod-group-name``, native
   ``spec.schedulingGroup.podGroupName``);
2. ``owner_uid``: the Workload's controller owner uid (also label ``kueue.x-k8s.io/job-uid``) is
   an owner uid of the PodGroup;
3. ``owner_name``: the Workload owner's name equals the PodGroup's name, or the ``spec.controllerRef``
   name of the native Workload the group belongs to (1.35 pod groups, 1.36+ PodGroups).

**Evidence.** How many members of a gang are placed and running comes, in this order of trust,
from the live pods (:mod:`exporter.cluster.pods`, where the gang's pods are watched), the
PodGroup's own counters (Coscheduling, Volcano), and last its phase, condition or annotations.
What they mean is judged in :mod:`exporter.cluster.gang_state` (the stages, and how each
scheduler counts its members); this module keeps the records and the joins, calls
:func:`~exporter.cluster.gang_state.evaluate` whenever one of them changes, and renders the result.
Being stuck depends on the clock, so each waiting gang gets a timer at its deadline instead of
re-evaluating on scrape.

The gang's stage answers one question for the Workload's stage (:mod:`exporter.cluster.workload_state`):
where Kueue writes no ``PodsReady`` (no ``waitForPodsReady``), an admitted Workload is ``running``
unless a joined gang says its pods are still assembling (:meth:`GangIndex.pods_assembling`), or,
with no gang joined, unless its own pods do (fewer running or succeeded than its pod sets count).

``gangscope_gang_idle_gpus`` is the GPUs of the placed pods of a gang that cannot train (waiting
for the rest, or not started), by reason, and ``gangscope_gang_idle_gpu_seconds_total``
integrates it over time while the collector runs: advanced at every evaluation and every
``IDLE_TICK`` seconds while a gang is idle, so a scrape reads it without rendering. Offline
(snapshot, explain) nothing runs over time: it stays 0.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import structlog

from ..exposition import Family, label_pairs
from ..fields import ParseError
from ..health import SourceHealth
from . import podgroups as pg
from .multimap import MultiMap
from .object_labels import PODGROUP_LABELS
from .gang_state import (KAI_DEFAULT_STALENESS_GRACE, PODS_ASSEMBLING, Gang, Members, Via,
                         children_members, counter_members, evaluate, pod_members, template_refs,
                         workload_members)
from .podgroups import NativeWorkload, PodGroupRecord
from .pods import Pod, PodChanges, PodStore
from .store import ClusterStore
from .unchanged import digest
from .volcano_queues import VolcanoQueues
from .workloads import Workload

if TYPE_CHECKING:
    from .jobs import JobIndex

log = structlog.get_logger(__name__)

DEFAULT_ASSEMBLY_TIMEOUT = 600.0
IDLE_TICK = 10.0  # seconds between advances of the idle GPU-seconds counter of idle gangs

_RANK: dict[str, int] = {"template": 0, "owner_uid": 1, "owner_name": 2}

PgKey = tuple[str, str, str]  # (source, namespace, name)
WlKey = tuple[str, str]  # (namespace, name)

_GANG = ("namespace", "workload", "podgroup")
_PG = ("namespace", "podgroup", "api")
GANG_INFO = Family(
    "gangscope_gang_info", "info",
    "A Kueue Workload joined to its PodGroup (1 per pair); join_key says which key matched, parent names the "
    "native CompositePodGroup the group belongs to.",
    (*_GANG, "api", "join_key", "parent"),
)
GANG_STAGE = Family(
    "gangscope_gang_stage", "gauge",
    "Stage of the gang: one series, value 1, labelled with the current stage (not_admitted, queued, placing, "
    "assembling, stuck, partially_bound, starting, scaling, initially_scheduled, assembled, finished, failed, "
    "unreported, empty, unknown; README, gang rules); none once its Workload finished.",
    (*_GANG, "stage"),
)
GANG_ASSEMBLY_STUCK = Family(
    "gangscope_gang_assembly_stuck", "gauge",
    "1 when the gang has waited longer than scheduleTimeoutSeconds (else --assembly-timeout; KAI: its staleness "
    "grace period) without its bound members reaching the minimum.",
    _GANG,
)
GANG_IDLE_GPUS = Family(
    "gangscope_gang_idle_gpus", "gauge",
    "GPUs held by placed pods of a gang that cannot train, by reason: members (running, waiting for the rest of the "
    "gang), starting (bound, no container reason yet), a waiting container's reason (ContainerCreating, "
    "ImagePullBackOff, ...; other for the rest); an empty reason with 0 when none is idle (from live pods; from PodGroup "
    "counters, running pods times GPUs per pod).",
    (*_GANG, "reason"),
)
GANG_DEADLINE = Family(
    "gangscope_gang_assembly_deadline_timestamp_seconds", "gauge",
    "When a waiting gang counts as stuck: admission (or PodGroup creation, its fall below the minimum, or its last "
    "scheduling gate going) plus its timeout; KAI: its stale-podgroup-timestamp plus the staleness grace period.",
    _GANG,
)
GANG_PODS = Family(
    "gangscope_gang_pods", "gauge",
    "Members of the gang by state from the best evidence: live pods (pending: unbound; bound: on a node, not all "
    "containers started; running; ready; succeeded; failed; and, when not 0, gated, terminating (leaving, still "
    "holding GPUs, not members) and unknown), else the PodGroup's counters (running, succeeded, failed).",
    (*_GANG, "state"),
)
GANG_IDLE_GPU_SECONDS = Family(
    "gangscope_gang_idle_gpu_seconds_total", "counter",
    "GPU-seconds held idle by the gang while it was below its minimum (gangscope_gang_idle_gpus integrated over "
    "time since the collector started).",
    _PG,
)
PODGROUP_UNSCHEDULABLE = Family(
    "gangscope_podgroup_unschedulable", "gauge",
    "1 per reason the gang scheduler gives while the gang waits: KAI schedulingConditions reasons (e.g. "
    "PodSchedulingErrors, OverLimit, QueueDoesNotExist), Volcano's Unschedulable reason, the native "
    "condition's reason (Unschedulable, SchedulerError).",
    (*_PG, "reason"),
)
FAMILIES = (GANG_INFO, GANG_STAGE, GANG_ASSEMBLY_STUCK, GANG_IDLE_GPUS, GANG_DEADLINE, GANG_PODS, PODGROUP_UNSCHEDULABLE)
_POD_STATES = ("bound", "running", "ready", "pending", "succeeded", "failed")
_POD_STATES_IF_ANY = ("gated", "terminating", "unknown")
_SAYS_UNSCHEDULABLE = ("queued", "assembling", "stuck", "partially_bound")  # the scheduler's reasons are shown then


def add_gang_arguments(p: argparse.ArgumentParser) -> None:
    """``--assembly-timeout``: the collector, snapshot and explain judge stuck gangs alike."""
    p.add_argument("--assembly-timeout", type=float, default=DEFAULT_ASSEMBLY_TIMEOUT, metavar="SECONDS",
                   help="how long an admitted gang may wait for all minMember pods before it counts as stuck, "
                        "when its PodGroup sets no scheduleTimeoutSeconds (default 600)")
    p.add_argument("--kai-staleness-grace-period", type=float, default=KAI_DEFAULT_STALENESS_GRACE, metavar="SECONDS",
                   help="KAI Scheduler's --default-staleness-grace-period: how long after it marks a gang stale "
                        "(kai.scheduler/stale-podgroup-timestamp) the gang counts as stuck (default 60, KAI's own; "
                        "negative: never)")


def render_gang(g: Gang, skip: frozenset[Family] = frozenset()) -> dict[Family, list[bytes]]:
    """The gang's lines but those of the families in ``skip`` (--metric-denylist: never formatted)."""
    rec = g.podgroup
    lead = label_pairs(_GANG, (rec.namespace, g.workload.name if g.workload else "", rec.name))
    out: dict[Family, list[bytes]] = {fam: [] for fam in FAMILIES}
    if g.workload is not None and g.via is not None and GANG_INFO not in skip:
        out[GANG_INFO] = [GANG_INFO.line(lead, 1, (rec.api_label, g.via, rec.parent))]
    if GANG_STAGE not in skip:
        out[GANG_STAGE] = [GANG_STAGE.head(lead) + _stage_tail(g.stage)]
    if g.stage not in ("unreported", "empty") and GANG_ASSEMBLY_STUCK not in skip:
        out[GANG_ASSEMBLY_STUCK] = [GANG_ASSEMBLY_STUCK.line(lead, 1 if g.stuck else 0)]
    if g.idle_gpus is not None and GANG_IDLE_GPUS not in skip:
        out[GANG_IDLE_GPUS] = [GANG_IDLE_GPUS.lines(lead, [_idle_tail(reason, gpus) for reason, gpus in g.idle]
                                                    or [_idle_tail("", 0)])]
    if g.deadline is not None and GANG_DEADLINE not in skip:
        out[GANG_DEADLINE] = [GANG_DEADLINE.line(lead, g.deadline)]
    m = g.members
    if m is not None and m.evidence in ("pods", "counters") and GANG_PODS not in skip:
        out[GANG_PODS] = [GANG_PODS.lines(lead, [_pods_tail(s, n) for s in _POD_STATES if (n := getattr(m, s)) is not None]
                                          + [_pods_tail(s, n) for s in _POD_STATES_IF_ANY if (n := getattr(m, s))])]
    if g.stage in _SAYS_UNSCHEDULABLE and rec.unschedulable and PODGROUP_UNSCHEDULABLE not in skip:
        reasons = sorted({u.reason for u in rec.unschedulable})
        out[PODGROUP_UNSCHEDULABLE] = [PODGROUP_UNSCHEDULABLE.line(label_pairs(_PG, (rec.namespace, rec.name, rec.api_label)), 1, (r,))
                                       for r in reasons]
    return out


@functools.lru_cache(maxsize=64)
def _stage_tail(stage: str) -> bytes:
    """The current stage's one series (value 1): a state set over every stage cost 9 series per
    gang, 8 of them 0."""
    return GANG_STAGE.tail(3, (stage,), 1)


@functools.lru_cache(maxsize=4096)
def _pods_tail(state: str, pods: int) -> bytes:
    """A pod count's series after the gang's labels: a gang's counts are small numbers that every
    gang repeats, and each pod event re-renders them all."""
    return GANG_PODS.tail(3, (state,), pods)


@functools.lru_cache(maxsize=4096)
def _idle_tail(reason: str, gpus: float) -> bytes:
    """An idle reason's series after the gang's labels (GPU counts repeat as pod counts do)."""
    return GANG_IDLE_GPUS.tail(3, (reason,), gpus)


def _same_lines(a: Gang, b: Gang) -> bool:
    """Whether two evaluations of a gang render the same lines (and hold the same idle GPUs)."""
    return (a.podgroup is b.podgroup and a.workload is b.workload and a.via == b.via and a.stage == b.stage
            and a.stuck == b.stuck and a.deadline == b.deadline and a.idle == b.idle and a.members == b.members)


class PodGroupHandler:
    """Informer handler of one PodGroup source (the protocol of exporter/kube: replace/apply).

    ``health`` (set by whoever runs the informer) counts parse errors and objects held.
    """

    def __init__(self, index: GangIndex, source: str) -> None:
        self.index, self.source = index, source
        self.health: SourceHealth | None = None

    def replace(self, objects: Iterable[Any]) -> None:
        self.index.replace_source(self.source, objects)

    def apply(self, event_type: str, obj: Any) -> None:
        """One watch event; BOOKMARK and unknown types are ignored; nothing raised leaves here."""
        try:
            if event_type == "DELETED":
                self.index.delete_object(self.source, obj)
            elif event_type in ("ADDED", "MODIFIED"):
                self.index.upsert_object(self.source, obj)
        except Exception:  # a bug must not stop the stream; counted as one, not as a bad object
            log.exception("podgroup_handler_failed", source=self.source)
            self.index.internal_error(self.source)


class GangIndex:
    """PodGroups of every source, the Workloads they may join, their pods, and the gang series.

    Workloads and their owner indexes are the store's, pods the pod store's; this keeps the
    PodGroups, native Workloads' templates, the template index (which PodGroup names the
    Workloads' pod templates carry) and the joins. ``clock`` is wall time (tests pass a fake one).
    """

    def __init__(
        self,
        store: ClusterStore,
        assembly_timeout: float = DEFAULT_ASSEMBLY_TIMEOUT,
        clock: Callable[[], float] = time.time,
        pods: PodStore | None = None,
    ) -> None:
        self.store = store
        self.exposition = store.exposition
        self.assembly_timeout = assembly_timeout
        self.clock = clock
        self.pods = pods
        self.kai_grace = KAI_DEFAULT_STALENESS_GRACE  # --kai-staleness-grace-period
        self.jobs: JobIndex | None = None  # set by exporter.cluster.jobs.attach_jobs
        self.volcano_queues: VolcanoQueues | None = None  # set by exporter.cluster.collector.build_collector
        self.exposition.register(*pg.FAMILIES, *FAMILIES, GANG_IDLE_GPU_SECONDS)
        self._skip = self.exposition.filtered((*pg.FAMILIES, *FAMILIES, GANG_IDLE_GPU_SECONDS))  # --metric-denylist
        self.podgroups: dict[PgKey, PodGroupRecord] = {}
        self.gangs: dict[PgKey, Gang] = {}
        self.native_workloads: dict[WlKey, NativeWorkload] = {}
        self._handlers = {source: PodGroupHandler(self, source) for source in pg.PARSERS}
        # source -> (namespace, object name) -> keys of its records (a 1.35 native Workload has several)
        self._objects: dict[str, dict[WlKey, list[PgKey]]] = {source: {} for source in pg.PARSERS}
        # source -> (namespace, object name) -> its digest (exporter.cluster.unchanged)
        self._digests: dict[str, dict[WlKey, int]] = {source: {} for source in pg.PARSERS}
        # Join indexes (the store indexes Workloads by owner uid and owner name).
        self._wl_template = MultiMap()  # (ns, api, pg name) -> wl keys
        self._wl_template_keys: dict[WlKey, list[tuple[str, str, str]]] = {}
        self._wl_records: dict[WlKey, Workload] = {}  # the record each Workload was last joined with
        self._pg_name = MultiMap()  # (ns, api, name) -> pg keys
        self._pg_owner_uid = MultiMap()  # uid -> pg keys
        self._pg_owner_name = MultiMap()  # (ns, name or controllerRef name) -> pg keys
        self._pg_native_wl = MultiMap()  # (ns, native Workload name) -> pg keys that name it
        self._children = MultiMap()  # (ns, parent CompositePodGroup name) -> pg keys of its children
        self._joined_to: MultiMap = MultiMap()  # wl key -> pg keys joined to it
        self._resolving = 0  # > 0 while a Workload event re-resolves its gangs
        self._parent_depth = 0  # composite parents being re-judged, nested
        self._to_sync: set[WlKey] = set()  # Workloads whose gangs changed since the last sync
        self._timers: dict[PgKey, asyncio.TimerHandle] = {}
        self._tick: asyncio.TimerHandle | None = None
        self._idle: dict[PgKey, list[float]] = {}  # key -> [GPU-seconds so far, since when, idle GPUs now]
        # The gangs whose series (and their PodGroups') are exported: not those of a finished (or
        # deactivated) Workload past --finished-detail (Workload.detail)
        self._shown: dict[PgKey, bool] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        store.on_workload_change.append(self._workload_changed)
        store.pods_assembling.append(self.pods_assembling)
        if pods is not None:
            pods.on_change.append(self._pods_changed)

    # ---- wiring
    def handlers(self) -> dict[str, PodGroupHandler]:
        return dict(self._handlers)

    def start_timers(self) -> None:
        """Arm stuck-assembly timers and the idle counter's tick in the running loop (offline users
        evaluate at one instant)."""
        self._loop = asyncio.get_running_loop()
        for key, gang in self.gangs.items():
            self._arm(key, gang)
        self._tick = self._loop.call_later(IDLE_TICK, self._advance_idle)

    def stop_timers(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        self._loop = None

    # ---- PodGroup side
    def upsert_object(self, source: str, obj: Any, count: bool = True) -> None:
        """Put one object of ``source``; ``count``: update the source's object count now (a LIST
        counts once, at its end: rendering the health series per object was 6% of the sync)."""
        fingerprint = digest(obj)
        digests = self._digests[source]
        if fingerprint is not None:
            meta = obj["metadata"]
            try:
                okey = (str(meta.get("namespace") or ""), meta["name"])
                if digests.get(okey) == fingerprint:
                    return  # it changed nothing read (exporter.cluster.unchanged)
            except (KeyError, TypeError):  # no usable name: parsing counts it
                fingerprint = None
        try:
            if source == "workloads_native":
                native = pg.parse_native_workload(source, obj)
                records, errors = native.records, list(native.errors)
            else:
                native = None
                records = pg.PARSERS[source](source, obj)
                errors = []
        except ParseError as exc:
            self.parse_error(source, 1, str(exc), obj)
            return
        errors += [e for r in records for e in pg.phase_errors(r)]
        if errors:
            self.parse_error(source, len(errors), "; ".join(errors), obj)
        meta = obj["metadata"]
        okey = (str(meta.get("namespace") or ""), meta["name"])
        objects = self._objects[source]
        old_keys = set(objects.get(okey, ()))
        now = self.clock()
        for rec in records:
            self._put_podgroup(rec, now)
            old_keys.discard(rec.key)
        for key in old_keys:
            self._drop_podgroup(key)
        objects[okey] = [r.key for r in records]
        if native is not None:
            self._put_native_workload(okey, native)
        if fingerprint is not None and not errors:  # one with problems is taken, and counted, again
            digests[okey] = fingerprint
        else:
            digests.pop(okey, None)
        if count:
            self._count(source)

    def delete_object(self, source: str, obj: Any) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            return
        okey = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        self._digests[source].pop(okey, None)
        for key in self._objects[source].pop(okey, ()):
            self._drop_podgroup(key)
        if source == "workloads_native":
            self._put_native_workload(okey, None)
        self._count(source)

    def replace_source(self, source: str, objects: Iterable[Any]) -> None:
        """A (re)list of one source: upsert everything listed, drop what the list no longer has."""
        before = set(self._objects[source])
        seen = set()
        for obj in objects:
            try:
                self.upsert_object(source, obj, count=False)
            except Exception:  # a bug must not lose the rest of the list
                log.exception("podgroup_handler_failed", source=source)
                self.internal_error(source)
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            if isinstance(meta, dict):
                seen.add((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
        for okey in before - seen:
            self._digests[source].pop(okey, None)
            for key in self._objects[source].pop(okey, ()):
                self._drop_podgroup(key)
            if source == "workloads_native":
                self._put_native_workload(okey, None)
        self._count(source)

    def _put_native_workload(self, okey: WlKey, native: NativeWorkload | None) -> None:
        """A native Workload's templates and controller: the PodGroups naming it may join anew."""
        if native is None:
            if self.native_workloads.pop(okey, None) is None:
                return
        else:
            self.native_workloads[okey] = native
        for key in list(self._pg_native_wl.of(okey)):
            self._resolve(key)

    def _put_podgroup(self, rec: PodGroupRecord, now: float) -> None:
        key = rec.key
        previous = self.podgroups.get(key)
        pg.settle_phase_since(rec, previous, now)
        if previous is not None:
            self._unindex_podgroup(previous)
        self.podgroups[key] = rec
        ns = rec.namespace
        self._pg_name.add((ns, rec.api_label, rec.name), key)
        for uid in rec.owner_uids:
            self._pg_owner_uid.add(uid, key)
        self._pg_owner_name.add((ns, rec.name), key)
        if rec.source == "workloads_native":
            for _, name in rec.owner_names[:1]:
                self._pg_owner_name.add((ns, name), key)
        elif rec.workload_ref:
            self._pg_native_wl.add((ns, rec.workload_ref), key)
        if rec.parent:
            self._children.add((ns, rec.parent), key)
        self._resolve(key)
        self._publish_podgroup(key)
        for parent in {previous.parent if previous else "", rec.parent} - {""}:
            self._resolve_parent(ns, parent)

    def _unindex_podgroup(self, rec: PodGroupRecord) -> None:
        key, ns = rec.key, rec.namespace
        self._pg_name.discard((ns, rec.api_label, rec.name), key)
        for uid in rec.owner_uids:
            self._pg_owner_uid.discard(uid, key)
        self._pg_owner_name.discard((ns, rec.name), key)
        for _, name in rec.owner_names[:1]:
            self._pg_owner_name.discard((ns, name), key)
        if rec.workload_ref:
            self._pg_native_wl.discard((ns, rec.workload_ref), key)
        if rec.parent:
            self._children.discard((ns, rec.parent), key)

    def _drop_podgroup(self, key: PgKey) -> None:
        rec = self.podgroups.pop(key, None)
        if rec is None:
            return
        self._unindex_podgroup(rec)
        gang = self.gangs.pop(key, None)
        self._disarm(key)
        self._idle.pop(key, None)
        self._shown.pop(key, None)
        self.exposition.delete(("podgroup", *key))
        self.exposition.delete(("gang", *key))
        self.exposition.delete(("gang_idle", *key))
        if gang is not None and gang.workload is not None:
            self._joined_to.discard(gang.workload.key, key)
            self._to_sync.add(gang.workload.key)
            if not self._resolving:
                self._sync_workloads()
        if rec.parent:
            self._resolve_parent(rec.namespace, rec.parent)

    # ---- Workload side
    def _workload_changed(self, key: WlKey) -> None:
        """The store's hook after a Workload is set, re-rendered or deleted. A re-render keeps the
        record (a backoff's end, its gangs' word, its Nodes' paths): the joins and judgements rest
        on the record alone, so its gangs are not judged again, only shown or hidden with it."""
        wl = self.store.workloads.get(key)
        if wl is not None and self._wl_records.get(key) is wl:
            for pg_key in list(self._joined_to.of(key)):
                gang = self.gangs.get(pg_key)
                if gang is not None:
                    self._render(pg_key, gang)
            return
        if wl is None:
            self._wl_records.pop(key, None)
        else:
            self._wl_records[key] = wl
        for k in self._wl_template_keys.pop(key, ()):
            self._wl_template.discard(k, key)
        keys = []
        if wl is not None:
            keys = [(wl.namespace, api, name) for api, name, _ in template_refs(wl)]
            for k in keys:
                self._wl_template.add(k, key)
            if keys:
                self._wl_template_keys[key] = keys
        if not self.podgroups:  # nothing to join (a cluster without gangs, or before their list)
            return
        affected = set(self._joined_to.of(key))
        if wl is not None:
            for k in keys:
                affected.update(self._pg_name.of(k))
            for uid in ClusterStore.owner_uids(wl):
                affected.update(self._pg_owner_uid.of(uid))
            if wl.owner is not None and wl.owner.name:
                affected.update(self._pg_owner_name.of((wl.namespace, wl.owner.name)))
                for (ns, name), native in self.native_workloads.items():
                    if ns == wl.namespace and native.controller is not None and native.controller[1] == wl.owner.name:
                        affected.update(self._pg_native_wl.of((ns, name)))
        self._resolving += 1
        try:
            for pg_key in affected:
                self._resolve(pg_key)
        finally:
            self._resolving -= 1
        self._to_sync.add(key)
        self._sync_workloads()

    # ---- pods
    def _pods_changed(self, changes: PodChanges) -> None:
        """Re-judge the gangs, composite parents and Workloads whose pods changed."""
        affected: set[PgKey] = set()
        for ns, api, name in changes.gangs:
            affected.update(self._pg_name.of((ns, api, name)))
        if changes.covered:
            affected |= {k for k in self.podgroups if self.pods is not None and self.pods.covers(k[0])}
        self._resolving += 1
        try:
            for key in affected:
                self._resolve(key)
        finally:
            self._resolving -= 1
        workloads = self.store.workloads
        self._to_sync.update(k for k in changes.workloads if k in workloads)
        for uid in changes.owners:
            self._to_sync.update(wl.key for wl in self.store.workloads_by_owner_uid(uid))
            if self.jobs is not None:
                for owner in self.jobs.owners_of(uid):
                    self._to_sync.update(wl.key for wl in self.store.workloads_by_owner_uid(owner))
        self._sync_workloads()

    def members(self, rec: PodGroupRecord) -> Members | None:
        """The best evidence for a gang (see the module docstring)."""
        if rec.composite:
            return children_members(rec, [self.gangs[k] for k in self._children.of((rec.namespace, rec.name))
                                          if k in self.gangs])
        if self.pods is not None:
            pods = self.pods.of_gang(rec.namespace, rec.api_label, rec.name)
            if pods or self.pods.covers(rec.source):
                return pod_members(rec, pods)
        return counter_members(rec)

    def _judge(self, rec: PodGroupRecord, wl: Workload | None, via: Via | None, members: Members | None,
               previous: Gang | None) -> Gang:
        return evaluate(rec, wl, via, self.clock(), self.assembly_timeout, members, previous, self.kai_grace)

    # ---- join + render
    def best_workload(self, rec: PodGroupRecord) -> tuple[Workload | None, Via | None]:
        ns = rec.namespace
        best: tuple[int, str] | None = None
        found: tuple[Workload | None, Via | None] = (None, None)

        def consider(workloads: Iterable[Workload], via: Via) -> None:
            nonlocal best, found
            for wl in workloads:
                if wl.namespace != ns:
                    continue
                rank = (_RANK[via], wl.name)
                if best is None or rank < best:
                    best, found = rank, (wl, via)

        workloads = self.store.workloads
        consider((workloads[k] for k in self._wl_template.of((ns, rec.api_label, rec.name)) if k in workloads), "template")
        if best is None:
            for uid in rec.owner_uids:
                consider(self.store.workloads_by_owner_uid(uid), "owner_uid")
        if best is None:
            consider(self.store.workloads_by_owner_name(ns, rec.name), "owner_name")
            if rec.source == "workloads_native":
                for _, name in rec.owner_names[:1]:
                    consider(self.store.workloads_by_owner_name(ns, name), "owner_name")
            elif rec.workload_ref:
                native = self.native_workloads.get((ns, rec.workload_ref))
                if native is not None and native.controller is not None:
                    consider(self.store.workloads_by_owner_name(ns, native.controller[1]), "owner_name")
        return found

    def _resolve(self, key: PgKey) -> None:
        rec = self.podgroups.get(key)
        if rec is None:
            return
        wl, via = self.best_workload(rec)
        old = self.gangs.get(key)
        if old is not None and old.workload is not None and (wl is None or old.workload.key != wl.key):
            self._joined_to.discard(old.workload.key, key)
        if wl is not None:
            self._joined_to.add(wl.key, key)
        self._render(key, self._judge(rec, wl, via, self.members(rec), old))

    def _resolve_parent(self, namespace: str, parent: str) -> None:
        """A child changed: re-judge the CompositePodGroup(s) of that name in the namespace (up a
        hierarchy at most 4 deep, v1beta1/types.go:126; deeper, or a cycle, stops here)."""
        if self._parent_depth >= 8:
            return
        self._parent_depth += 1
        try:
            for key in list(self._pg_name.of((namespace, "native", parent))):
                if key[0] == "compositepodgroups_native":
                    self._resolve(key)
        finally:
            self._parent_depth -= 1

    def _render(self, key: PgKey, gang: Gang) -> None:
        old = self.gangs.get(key)
        self.gangs[key] = gang
        shown = gang.workload is None or gang.workload.detail
        was_shown = self._shown.get(key)
        self._shown[key] = shown
        if old is None or not _same_lines(old, gang) or was_shown != shown:  # most pod events change no count it exports
            self.exposition.set(("gang", *key), render_gang(gang, self._skip) if shown else {})
            self._set_idle(key, gang, was_shown != shown)
            if was_shown is not None and was_shown != shown:
                self._publish_podgroup(key)
        self._arm(key, gang)
        self._to_sync.update(g.workload.key for g in (old, gang) if g is not None and g.workload is not None)
        if old is not None and old.stage != gang.stage and gang.podgroup.parent:
            self._resolve_parent(gang.podgroup.namespace, gang.podgroup.parent)
        if not self._resolving:  # a Workload event syncs once, after all its gangs are resolved
            self._sync_workloads()

    # ---- idle GPU-seconds
    def _set_idle(self, key: PgKey, gang: Gang, shown_changed: bool) -> None:
        """Advance the gang's idle GPU-seconds to now at its old rate, then take the new rate; the
        counter's line is rendered again only when its value (or whether it is shown) moved."""
        now = self.clock()
        acc = self._idle.get(key)
        if acc is None:
            if gang.idle_gpus is None:
                return
            acc = self._idle[key] = [0.0, now, 0.0]
            shown_changed = True
        before = acc[0]
        if self._loop is not None:  # offline (no timers) nothing runs over time: the counter stays 0
            acc[0] += acc[2] * max(0.0, now - acc[1])
        acc[1], acc[2] = now, gang.idle_gpus or 0.0
        if shown_changed or acc[0] != before:
            self._render_idle(key)

    def _publish_podgroup(self, key: PgKey) -> None:
        """The PodGroup's lines into the exposition, or none while its gang is not shown. They are
        rendered here, when shown: most PodGroups belong to finished Workloads, whose detail goes,
        and rendering lines that are never published was a quarter of the gang index's sync."""
        rec = self.podgroups.get(key)
        if rec is None:
            return
        if not self._shown.get(key, True):
            self.exposition.delete(("podgroup", *key))
            return
        lines: dict[Family, list[bytes] | list[str]] = {**pg.render(rec, self._skip)}
        allowlist = self.store.labels_allowlist
        if allowlist is not None:
            lines[PODGROUP_LABELS] = allowlist.lines("podgroups", PODGROUP_LABELS, (rec.namespace, rec.name, rec.api_label),
                                                     rec.labels)
        self.exposition.set(("podgroup", *key), lines)

    def _render_idle(self, key: PgKey) -> None:
        if GANG_IDLE_GPU_SECONDS in self._skip:
            return  # never formatted
        if not self._shown.get(key, True):
            self.exposition.delete(("gang_idle", *key))
            return
        rec = self.podgroups[key]
        total = self._idle[key][0]
        self.exposition.set(("gang_idle", *key), {GANG_IDLE_GPU_SECONDS: [
            GANG_IDLE_GPU_SECONDS.sample((rec.namespace, rec.name, rec.api_label), round(total, 3))]})

    def _advance_idle(self) -> None:
        """The tick: move the counters of the gangs idle now (others do not change)."""
        now = self.clock()
        for key, acc in self._idle.items():
            if acc[2] > 0 and key in self.podgroups:
                acc[0] += acc[2] * max(0.0, now - acc[1])
                acc[1] = now
                self._render_idle(key)
        if self._loop is not None:
            self._tick = self._loop.call_later(IDLE_TICK, self._advance_idle)

    # ---- the Workload's pods
    def pods_assembling(self, wl_key: WlKey) -> bool | None:
        """The word on an admitted Workload's pods (see :data:`PODS_ASSEMBLING`): True if a joined
        gang is still assembling, False if all joined gangs that say anything are placed; with no
        gang's word, its own watched pods: True while fewer run (or have succeeded) than its pod
        sets count, False once they all do; None when nothing is known."""
        answer = None
        for k in self._joined_to.of(wl_key):
            gang = self.gangs.get(k)
            said = PODS_ASSEMBLING.get(gang.stage) if gang is not None else None
            if said:
                return True
            if said is False:
                answer = False
        if answer is None and self.pods is not None:
            wl = self.store.workloads.get(wl_key)
            if wl is not None:
                pods = self.workload_pods(wl)
                if pods:  # none seen proves nothing: the pods may not be watched
                    counts = workload_members(pods)
                    need = sum(ps.count for ps in wl.podsets)
                    return (counts.running or 0) + (counts.succeeded or 0) < need
        return answer

    def workload_pods(self, wl: Workload) -> list[Pod]:
        """A Kueue Workload's watched pods: by Kueue's workload annotation, by its owner's uid (or the
        ``kueue.x-k8s.io/job-uid`` label), and through the owner's child JobSet (a TrainJob's)."""
        if self.pods is None:
            return []
        found = {p.uid: p for p in self.pods.of_workload(wl.namespace, wl.name)}
        for uid in ClusterStore.owner_uids(wl):
            uids = [uid, *(self.jobs.children_of(uid) if self.jobs is not None else ())]
            for u in uids:
                for p in self.pods.of_owner(u):
                    if p.namespace == wl.namespace and (not p.workload or p.workload == wl.name):
                        found[p.uid] = p
        return list(found.values())

    def _sync_workloads(self) -> None:
        """Re-render the Workloads whose stage rests on their gangs' or pods' word (admitted, no
        PodsReady) and whose word is now another."""
        while self._to_sync:
            wl_key = self._to_sync.pop()
            state = wl.state if (wl := self.store.workloads.get(wl_key)) is not None else None
            if state is not None and state.uses_pods_signal and state.pods_assembling != self.pods_assembling(wl_key):
                self.store.refresh(wl_key)  # its stage now uses the new word: the next check finds them equal

    def _arm(self, key: PgKey, gang: Gang) -> None:
        self._disarm(key)
        if self._loop is None or gang.deadline is None or gang.stuck:
            return
        delay = max(0.0, gang.deadline - self.clock())
        self._timers[key] = self._loop.call_later(delay, self._expire, key)

    def _disarm(self, key: PgKey) -> None:
        handle = self._timers.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _expire(self, key: PgKey) -> None:
        self._timers.pop(key, None)
        gang = self.gangs.get(key)
        if gang is not None:
            self._render(key, self._judge(gang.podgroup, gang.workload, gang.via, gang.members, gang))

    def reevaluate(self) -> None:
        """Re-evaluate every gang at the current clock (offline tools and tests; the collector uses timers)."""
        for key, gang in list(self.gangs.items()):
            self._render(key, self._judge(gang.podgroup, gang.workload, gang.via, self.members(gang.podgroup), gang))

    # ---- lookups (explain)
    def gangs_of(self, wl_key: WlKey) -> list[Gang]:
        return [self.gangs[k] for k in sorted(self._joined_to.of(wl_key)) if k in self.gangs]

    def find_podgroups(self, namespace: str, name: str) -> list[Gang]:
        return [g for k, g in sorted(self.gangs.items()) if k[1] == namespace and k[2] == name]

    def children(self, gang: Gang) -> list[Gang]:
        """The child groups of a CompositePodGroup."""
        rec = gang.podgroup
        return [self.gangs[k] for k in sorted(self._children.of((rec.namespace, rec.name))) if k in self.gangs]

    # ---- health
    def parse_error(self, source: str, count: int, detail: str, obj: Any) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        log.warning("object_parse_problems", source=source, object=name, count=count, detail=detail[:500])
        health = self._handlers[source].health
        if health is not None:
            health.parse_error(count)

    def internal_error(self, source: str) -> None:
        health = self._handlers[source].health
        if health is not None:
            health.internal_error()

    def _count(self, source: str) -> None:
        health = self._handlers[source].health
        if health is not None:
            health.set_objects(len(self._objects[source]))


def attach_gangs(
    store: ClusterStore,
    assembly_timeout: float = DEFAULT_ASSEMBLY_TIMEOUT,
    clock: Callable[[], float] = time.time,
    pods: PodStore | None = None,
) -> GangIndex:
    """The gang index of a process, hooked on ``store`` (and ``pods``); registers the podgroup and gang families."""
    return GangIndex(store, assembly_timeout, clock, pods)
