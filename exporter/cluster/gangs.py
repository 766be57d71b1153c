"""Gangs: PodGroups joined to Kueue Workloads, assembly diagnosis, and their series.

How to attach (collector main, snapshot, explain)::

    gangs = attach_gangs(store, assembly_timeout=600.0)   # store: exporter.cluster.store.ClusterStore
    handlers = gangs.handlers()   # {source: PodGroupHandler}, the sources podgroups_coscheduling,
                                  # podgroups_coscheduling_legacy, podgroups_volcano, podgroups_native,
                                  # workloads_native (exporter.kube.resources); replace(objects) /
                                  # apply(event_type, obj); set handlers[s].health = SourceHealth(...)
                                  # to count parse errors and objects there
    gangs.start_timers()          # once, inside the collector's event loop (stuck-assembly deadlines)
    gangs.gangs_of((ns, workload)) / gangs.find_podgroups(ns, name) -> [Gang]   # explain

It registers itself on ``store.on_workload_change``, so a Workload event re-resolves the joins
its keys reach; a PodGroup event re-resolves that group. Offline users (snapshot, explain) need
no timers: every gang is evaluated at the clock of its last change, ``reevaluate()`` re-checks
all of them at the current time.

``GangIndex`` keeps every PodGroup record (three APIs, :mod:`exporter.cluster.podgroups`) and a
reference to every Workload record (:mod:`exporter.cluster.workloads`), with indexes for the join
keys of ARCHITECTURE.md, in that order of trust:

1. ``template``: a pod template of the Workload names the group (label
   ``scheduling.x-k8s.io/pod-group``, legacy ``pod-group.scheduling.sigs.k8s.io``, Volcano
   annotation ``scheduling.k8s.io/group-name``, native ``spec.schedulingGroup.podGroupName``);
2. ``owner_uid``: the Workload's controller owner uid (also label ``kueue.x-k8s.io/job-uid``) is
   an owner uid of the PodGroup;
3. ``owner_name``: the Workload owner's name equals the PodGroup's name (or, for a 1.35 native
   Workload's pod group, its ``spec.controllerRef`` name).

A PodGroup joins the one Workload with the most trusted key (ties: the Workload name); a
Workload can have several PodGroups. A change on either side re-resolves only the PodGroups the
changed object's keys reach, then re-renders those gangs' lines.

The gang's stage is exported in its own state set ``gangscope_gang_stage``, and it answers one
question for the Workload's stage (:mod:`exporter.cluster.workload_state`): where Kueue writes no
``PodsReady`` (no ``waitForPodsReady``), an admitted Workload is ``running`` unless a joined gang
says its pods are still assembling (:meth:`GangIndex.pods_assembling`). The gang stages:
``not_admitted`` (the joined Workload is not admitted: an admission problem, not an assembly one),
``assembling`` (waiting within the window), ``stuck`` (waiting past ``scheduleTimeoutSeconds`` or
``--assembly-timeout``), ``partially_bound`` (some pods bound, the rest cannot be placed:
Volcano/Coscheduling ``Unknown``, or 0 < running < minMember), ``assembled``, ``finished``,
``failed`` and ``unreported`` (1.35 native groups carry no status). Being stuck depends on the
clock, so each waiting gang gets a timer at its deadline instead of re-evaluating on scrape.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from ..exposition import Family, format_value
from ..exposition import escape_label_value as esc
from ..fields import ParseError
from ..health import SourceHealth
from . import podgroups as pg
from .podgroups import PodGroupRecord
from .store import ClusterStore
from .workloads import Workload

log = structlog.get_logger(__name__)

DEFAULT_ASSEMBLY_TIMEOUT = 600.0

Via = Literal["template", "owner_uid", "owner_name"]
_RANK: dict[str, int] = {"template": 0, "owner_uid": 1, "owner_name": 2}
GANG_STAGES = ("not_admitted", "assembling", "stuck", "partially_bound", "assembled", "finished", "failed", "unreported")
# What a gang stage says about its Workload's pods: still assembling (True), all placed (False),
# nothing (absent: not admitted yet, or a 1.35 native group without status).
PODS_ASSEMBLING = {"assembling": True, "stuck": True, "partially_bound": True,
                   "assembled": False, "finished": False, "failed": False}

PgKey = tuple[str, str, str]  # (source, namespace, name)
WlKey = tuple[str, str]  # (namespace, name)

_GANG = ("namespace", "workload", "podgroup")
GANG_INFO = Family(
    "gangscope_gang_info", "info", "A Kueue Workload joined to its PodGroup (1 per pair); join_key says which key matched.",
    ("namespace", "workload", "podgroup", "api", "join_key"),
)
GANG_STAGE = Family(
    "gangscope_gang_stage", "gauge",
    "Assembly stage of the gang (state set): not_admitted, assembling, stuck, partially_bound, assembled, finished, failed, unreported.",
    (*_GANG, "stage"),
)
GANG_ASSEMBLY_STUCK = Family(
    "gangscope_gang_assembly_stuck", "gauge",
    "1 when the gang has waited longer than scheduleTimeoutSeconds (else --assembly-timeout) since admission without reaching Running.",
    _GANG,
)
GANG_IDLE_GPUS = Family(
    "gangscope_gang_idle_gpus", "gauge",
    "GPUs held by running pods of a gang with fewer than minMember running: allocated, no training possible.",
    _GANG,
)
GANG_DEADLINE = Family(
    "gangscope_gang_assembly_deadline_timestamp_seconds", "gauge",
    "When a waiting gang counts as stuck: admission (or PodGroup creation) plus its timeout.",
    _GANG,
)
FAMILIES = (GANG_INFO, GANG_STAGE, GANG_ASSEMBLY_STUCK, GANG_IDLE_GPUS, GANG_DEADLINE)

# Workload template keys that name a PodGroup, and the API each one names.
TEMPLATE_LABELS = (
    (pg.COSCHEDULING_PODGROUP_LABEL, "coscheduling"),
    (pg.COSCHEDULING_LEGACY_PODGROUP_LABEL, "coscheduling"),
)
TEMPLATE_ANNOTATIONS = ((pg.VOLCANO_GROUP_ANNOTATION, "volcano"),)


@dataclass(slots=True)
class Gang:
    """One PodGroup with its joined Workload (or none) and its evaluated assembly state."""

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

    def as_dict(self) -> dict[str, Any]:
        return {
            "podgroup": pg.record_dict(self.podgroup),
            "workload": self.workload.name if self.workload else None,
            "join_key": self.via, "stage": self.stage, "stuck": self.stuck, "wait_start": self.wait_start,
            "deadline": self.deadline, "timeout_seconds": self.timeout, "gpus_per_pod": self.gpus_per_pod,
            "idle_gpus": self.idle_gpus,
        }


def add_gang_arguments(p: argparse.ArgumentParser) -> None:
    """``--assembly-timeout``: the collector, snapshot and explain judge stuck gangs alike."""
    p.add_argument("--assembly-timeout", type=float, default=DEFAULT_ASSEMBLY_TIMEOUT, metavar="SECONDS",
                   help="how long an admitted gang may wait for all minMember pods before it counts as stuck, "
                        "when its PodGroup sets no scheduleTimeoutSeconds (default 600)")


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
        named = [g for api, name, g in template_refs(wl) if api == rec.api and name == rec.name]
        if named:
            return named[0]
    values = {ps.gpus_per_pod for ps in wl.podsets if ps.count > 0}
    return min(values) if values else None


def evaluate(rec: PodGroupRecord, wl: Workload | None, via: Via | None, now: float, default_timeout: float) -> Gang:
    """The gang's stage, stuck flag, deadline and idle GPUs at ``now`` (pure: tests call it directly)."""
    state = rec.gang_state
    timeout = float(rec.schedule_timeout_seconds) if rec.schedule_timeout_seconds else default_timeout
    admitted_at = None
    not_admitted = False
    if wl is not None:
        adm = wl.conditions.get("Admitted")
        if adm is not None and adm.status == "True":
            admitted_at = adm.last_transition_seconds
        elif not wl.condition_true("Finished"):
            not_admitted = True
    starts = [t for t in (rec.created, admitted_at) if t is not None]
    wait_start = max(starts) if starts else None
    running = rec.running
    partial = state == "partial" or (
        state == "waiting" and running is not None and rec.min_member is not None and 0 < running < rec.min_member
    )
    deadline = stuck = None
    if state in ("waiting", "partial") and not not_admitted:
        deadline = wait_start + timeout if wait_start is not None else None
        stuck = deadline is not None and now >= deadline
    if state in ("assembled", "finished", "failed", "unreported"):
        stage = state
    elif not_admitted:
        stage = "not_admitted"
    elif partial:
        stage = "partially_bound"
    else:
        stage = "stuck" if stuck else "assembling"
    per_pod = gpus_per_pod(wl, rec, via) if wl is not None else None
    idle = None
    if per_pod is not None and running is not None:
        idle = running * per_pod if partial and not not_admitted else 0.0
    return Gang(rec, wl, via, stage, bool(stuck), wait_start, deadline, timeout, per_pod, idle)


def render_gang(g: Gang) -> dict[Family, list[str]]:
    rec = g.podgroup
    base = f'namespace="{esc(rec.namespace)}",workload="{esc(g.workload.name if g.workload else "")}",podgroup="{esc(rec.name)}"'
    out: dict[Family, list[str]] = {fam: [] for fam in FAMILIES}
    if g.workload is not None and g.via is not None:
        out[GANG_INFO] = [f'{GANG_INFO.name}{{{base},api="{rec.api}",join_key="{g.via}"}} 1\n']
    out[GANG_STAGE] = [f'{GANG_STAGE.name}{{{base},stage="{s}"}} {1 if s == g.stage else 0}\n' for s in GANG_STAGES]
    if g.stage != "unreported":
        out[GANG_ASSEMBLY_STUCK] = [f"{GANG_ASSEMBLY_STUCK.name}{{{base}}} {1 if g.stuck else 0}\n"]
    if g.idle_gpus is not None:
        out[GANG_IDLE_GPUS] = [f"{GANG_IDLE_GPUS.name}{{{base}}} {format_value(g.idle_gpus)}\n"]
    if g.deadline is not None:
        out[GANG_DEADLINE] = [f"{GANG_DEADLINE.name}{{{base}}} {format_value(g.deadline)}\n"]
    return out


class _Multi(dict):
    """key -> set of keys, with removal that drops empty sets."""

    def add(self, k: Any, v: Any) -> None:
        self.setdefault(k, set()).add(v)

    def discard(self, k: Any, v: Any) -> None:
        s = self.get(k)
        if s is not None:
            s.discard(v)
            if not s:
                del self[k]

    def of(self, k: Any) -> set:
        return self.get(k, set())


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
    """PodGroups of every source, the Workloads they may join, and the gang series.

    Workloads and their owner indexes are the store's; this keeps the PodGroups, the template
    index (which PodGroup names the Workloads' pod templates carry) and the joins.
    ``clock`` is wall time (tests pass a fake one).
    """

    def __init__(
        self,
        store: ClusterStore,
        assembly_timeout: float = DEFAULT_ASSEMBLY_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.exposition = store.exposition
        self.assembly_timeout = assembly_timeout
        self.clock = clock
        self.exposition.register(*pg.FAMILIES, *FAMILIES)
        self.podgroups: dict[PgKey, PodGroupRecord] = {}
        self.gangs: dict[PgKey, Gang] = {}
        self._handlers = {source: PodGroupHandler(self, source) for source in pg.PARSERS}
        # source -> (namespace, object name) -> keys of its records (a 1.35 native Workload has several)
        self._objects: dict[str, dict[WlKey, list[PgKey]]] = {source: {} for source in pg.PARSERS}
        # Join indexes (the store indexes Workloads by owner uid and owner name).
        self._wl_template = _Multi()  # (ns, api, pg name) -> wl keys
        self._wl_template_keys: dict[WlKey, list[tuple[str, str, str]]] = {}
        self._pg_name = _Multi()  # (ns, api, name) -> pg keys
        self._pg_owner_uid = _Multi()  # uid -> pg keys
        self._pg_owner_name = _Multi()  # (ns, name or controllerRef name) -> pg keys
        self._joined_to: _Multi = _Multi()  # wl key -> pg keys joined to it
        self._resolving = 0  # > 0 while a Workload event re-resolves its gangs
        self._to_sync: set[WlKey] = set()  # Workloads whose gangs changed since the last sync
        self._timers: dict[PgKey, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        store.on_workload_change.append(self._workload_changed)
        store.pods_assembling.append(self.pods_assembling)

    # ---- wiring
    def handlers(self) -> dict[str, PodGroupHandler]:
        return dict(self._handlers)

    def start_timers(self) -> None:
        """Arm stuck-assembly timers in the running loop (offline users evaluate at one instant)."""
        self._loop = asyncio.get_running_loop()
        for key, gang in self.gangs.items():
            self._arm(key, gang)

    def stop_timers(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._loop = None

    # ---- PodGroup side
    def upsert_object(self, source: str, obj: Any) -> None:
        try:
            records = pg.PARSERS[source](source, obj)
        except ParseError as exc:
            self.parse_error(source, 1, str(exc), obj)
            return
        errors = [e for r in records for e in pg.phase_errors(r)]
        if errors:
            self.parse_error(source, len(errors), "; ".join(errors), obj)
        first = records[0]
        okey = (first.namespace, first.workload_ref if source == "workloads_native" else first.name)
        objects = self._objects[source]
        old_keys = set(objects.get(okey, ()))
        now = self.clock()
        for rec in records:
            self._put_podgroup(rec, now)
            old_keys.discard(rec.key)
        for key in old_keys:
            self._drop_podgroup(key)
        objects[okey] = [r.key for r in records]
        self._count(source)

    def delete_object(self, source: str, obj: Any) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict):
            return
        okey = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        for key in self._objects[source].pop(okey, ()):
            self._drop_podgroup(key)
        self._count(source)

    def replace_source(self, source: str, objects: Iterable[Any]) -> None:
        """A (re)list of one source: upsert everything listed, drop what the list no longer has."""
        before = set(self._objects[source])
        seen = set()
        for obj in objects:
            try:
                self.upsert_object(source, obj)
            except Exception:  # a bug must not lose the rest of the list
                log.exception("podgroup_handler_failed", source=source)
                self.internal_error(source)
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            if isinstance(meta, dict):
                seen.add((str(meta.get("namespace") or ""), str(meta.get("name") or "")))
        for okey in before - seen:
            for key in self._objects[source].pop(okey, ()):
                self._drop_podgroup(key)
        self._count(source)

    def _put_podgroup(self, rec: PodGroupRecord, now: float) -> None:
        key = rec.key
        previous = self.podgroups.get(key)
        pg.settle_phase_since(rec, previous, now)
        if previous is not None:
            self._unindex_podgroup(previous)
        self.podgroups[key] = rec
        ns = rec.namespace
        self._pg_name.add((ns, rec.api, rec.name), key)
        for uid in rec.owner_uids:
            self._pg_owner_uid.add(uid, key)
        self._pg_owner_name.add((ns, rec.name), key)
        if rec.source == "workloads_native":
            for _, name in rec.owner_names[:1]:
                self._pg_owner_name.add((ns, name), key)
        self.exposition.set(("podgroup", *key), pg.render(rec))
        self._resolve(key)

    def _unindex_podgroup(self, rec: PodGroupRecord) -> None:
        key, ns = rec.key, rec.namespace
        self._pg_name.discard((ns, rec.api, rec.name), key)
        for uid in rec.owner_uids:
            self._pg_owner_uid.discard(uid, key)
        self._pg_owner_name.discard((ns, rec.name), key)
        for _, name in rec.owner_names[:1]:
            self._pg_owner_name.discard((ns, name), key)

    def _drop_podgroup(self, key: PgKey) -> None:
        rec = self.podgroups.pop(key, None)
        if rec is None:
            return
        self._unindex_podgroup(rec)
        gang = self.gangs.pop(key, None)
        self._disarm(key)
        self.exposition.delete(("podgroup", *key))
        self.exposition.delete(("gang", *key))
        if gang is not None and gang.workload is not None:
            self._joined_to.discard(gang.workload.key, key)
            self._to_sync.add(gang.workload.key)
            if not self._resolving:
                self._sync_workloads()

    # ---- Workload side
    def _workload_changed(self, key: WlKey) -> None:
        """The store's hook after a Workload is set, re-rendered or deleted."""
        for k in self._wl_template_keys.pop(key, ()):
            self._wl_template.discard(k, key)
        wl = self.store.workloads.get(key)
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
                affected |= self._pg_name.of(k)
            for uid in ClusterStore.owner_uids(wl):
                affected |= self._pg_owner_uid.of(uid)
            if wl.owner is not None and wl.owner.name:
                affected |= self._pg_owner_name.of((wl.namespace, wl.owner.name))
        self._resolving += 1
        try:
            for pg_key in affected:
                self._resolve(pg_key)
        finally:
            self._resolving -= 1
        self._to_sync.add(key)
        self._sync_workloads()

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
        consider((workloads[k] for k in self._wl_template.of((ns, rec.api, rec.name)) if k in workloads), "template")
        if best is None:
            for uid in rec.owner_uids:
                consider(self.store.workloads_by_owner_uid(uid), "owner_uid")
        if best is None:
            consider(self.store.workloads_by_owner_name(ns, rec.name), "owner_name")
            if rec.source == "workloads_native":
                for _, name in rec.owner_names[:1]:
                    consider(self.store.workloads_by_owner_name(ns, name), "owner_name")
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
        self._render(key, evaluate(rec, wl, via, self.clock(), self.assembly_timeout))

    def _render(self, key: PgKey, gang: Gang) -> None:
        old = self.gangs.get(key)
        self.gangs[key] = gang
        self.exposition.set(("gang", *key), render_gang(gang))
        self._arm(key, gang)
        self._to_sync.update(g.workload.key for g in (old, gang) if g is not None and g.workload is not None)
        if not self._resolving:  # a Workload event syncs once, after all its gangs are resolved
            self._sync_workloads()

    def pods_assembling(self, wl_key: WlKey) -> bool | None:
        """The joined gangs' word on the Workload's pods (see :data:`PODS_ASSEMBLING`): True if
        any gang is still assembling, False if all that say anything are placed, else None."""
        answer = None
        for k in self._joined_to.of(wl_key):
            gang = self.gangs.get(k)
            said = PODS_ASSEMBLING.get(gang.stage) if gang is not None else None
            if said:
                return True
            if said is False:
                answer = False
        return answer

    def _sync_workloads(self) -> None:
        """Re-render the Workloads whose stage rests on their gangs' word (admitted, no PodsReady)
        and whose gangs now say something else."""
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
            self._render(key, evaluate(gang.podgroup, gang.workload, gang.via, self.clock(), self.assembly_timeout))

    def reevaluate(self) -> None:
        """Re-evaluate every gang at the current clock (offline tools and tests; the collector uses timers)."""
        for key, gang in list(self.gangs.items()):
            self._render(key, evaluate(gang.podgroup, gang.workload, gang.via, self.clock(), self.assembly_timeout))

    # ---- lookups (explain)
    def gangs_of(self, wl_key: WlKey) -> list[Gang]:
        return [self.gangs[k] for k in sorted(self._joined_to.of(wl_key)) if k in self.gangs]

    def find_podgroups(self, namespace: str, name: str) -> list[Gang]:
        return [g for k, g in sorted(self.gangs.items()) if k[1] == namespace and k[2] == name]

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
) -> GangIndex:
    """The gang index of a process, hooked on ``store``; registers the podgroup and gang families."""
    return GangIndex(store, assembly_timeout, clock)
