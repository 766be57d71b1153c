"""The jobs worth a look, for the collector's landing page: a short list of what holds jobs back,
worst first, each to be explained by ``/debug/explain``.

A pure function of the records the collector keeps (its judgements already made: a gang's stage,
a Workload's stage), so that it says nothing the explain output would not: a gang that failed,
is partially bound or stuck assembling; a running Workload with unhealthy nodes or being
evicted; a job that runs slow by its controller (a JobSet restarting, a TrainJob whose progress
stands still for ``stale_after``, as explain's job layer judges them); then Workloads that wait
(inadmissible, in backoff, held by an admission check, preempting, queued). Healthy running and
finished jobs are left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import job_state

if TYPE_CHECKING:
    from .gangs import Gang
    from .jobs import JobRecord
    from .workloads import Workload

# Gang stages and Workload stages worth a look, worst first (what exporter/explain.py calls blocking).
GANG_ORDER = ("failed", "partially_bound", "stuck")
WORKLOAD_ORDER = ("evicting", "inadmissible", "backoff", "admission_checks", "preempting", "held", "queued")
LIMIT = 8


@dataclass(frozen=True, slots=True)
class Flagged:
    namespace: str
    name: str  # what explain is asked about: the owner job's name where there is one
    why: str


def _target(wl: Workload) -> str:
    return wl.owner.name if wl.owner is not None and wl.owner.name else wl.name


def slow_job(rec: JobRecord, now: float, stale_after: float) -> str | None:
    """Why the job controller says the job is slow, or None (exporter/explain.py's job layer)."""
    if job_state.restarting(rec) is not None:
        return f"{rec.kind} restarting"
    if job_state.progress_stale_since(rec, now, stale_after) is not None:
        return f"{rec.kind} progress stale at {job_state.progress_text(rec)}"
    return None


def worth_a_look(workloads: Iterable[Workload], gangs: Iterable[Gang], jobs: Iterable[JobRecord] = (),
                 now: float = 0.0, stale_after: float = float("inf"), limit: int = LIMIT) -> list[Flagged]:
    """At most ``limit`` jobs, one entry each, worst first, then by namespace and name."""
    ranked: list[tuple[int, str, str, str]] = []
    for g in gangs:
        if g.stage in GANG_ORDER:
            rec = g.podgroup
            ns, name = (g.workload.namespace, _target(g.workload)) if g.workload is not None else (rec.namespace, rec.name)
            why = {"failed": "gang failed", "partially_bound": "gang partially bound",
                   "stuck": "gang stuck assembling"}[g.stage]
            if g.idle_gpus:
                why += f", {g.idle_gpus:g} GPUs idle"
            ranked.append((GANG_ORDER.index(g.stage), ns, name, why))
    base = len(GANG_ORDER)
    for job in jobs:
        slow = slow_job(job, now, stale_after)
        if slow is not None:
            ranked.append((base, job.namespace, job.name, slow))
    base += 1
    for wl in workloads:
        if wl.stage == "running" and wl.unhealthy_nodes:
            ranked.append((base, wl.namespace, _target(wl), f"running with unhealthy node {wl.unhealthy_nodes[0]}"))
        elif wl.stage in WORKLOAD_ORDER:
            ranked.append((base + 1 + WORKLOAD_ORDER.index(wl.stage), wl.namespace, _target(wl), wl.stage.replace("_", " ")))
    out: list[Flagged] = []
    seen: set[tuple[str, str]] = set()
    for _, ns, name, why in sorted(ranked):
        if (ns, name) not in seen and len(out) < limit:
            seen.add((ns, name))
            out.append(Flagged(ns, name, why))
    return out
