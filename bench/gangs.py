"""Benchmark: 20,000 Kueue Workloads + 20,000 PodGroups through the store and the gang index.

Reports the initial sync (both LISTs handed to the handlers, joins and rendering included), the
cost of one PodGroup watch event and of one Workload watch event (parse, join, re-render) in
events per second on one core (target: at least 5,000), and the scrape render time.

    .venv/bin/python bench/gangs.py [--workloads 20000]

The objects are decoded JSON (what the informer hands over), so the figures exclude HTTP and
orjson; bench/collector.py measures those. A third of the pairs join by each key (template
label, owner uid, owner name); a PodGroup event flips its phase so every event re-renders.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import time
from typing import Any

import psutil

from exporter.cluster.gangs import attach_gangs
from exporter.cluster.store import ClusterStore
from exporter.exposition import Exposition

TS = "2026-08-20T10:00:00Z"


def workload(i: int) -> dict[str, Any]:
    ns, name, job = f"team-{i % 50}", f"job-train-{i}-abcde", f"train-{i}"
    labels = {"scheduling.x-k8s.io/pod-group": job} if i % 3 == 0 else {}
    hosts = [f"node-{(i * 16 + h) % 4096}" for h in range(16)]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "namespace": ns, "uid": f"wl-{i}", "resourceVersion": str(i), "creationTimestamp": TS,
                     "labels": {"kueue.x-k8s.io/job-uid": f"job-{i}"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"job-{i}", "controller": True}]},
        "spec": {"active": True, "queueName": "q", "priorityClassRef": {"name": "high"}, "podSets": [{
            "name": "main", "count": 16, "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
        "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": [{
            "name": "main", "count": 16, "flavors": {"nvidia.com/gpu": "h100"},
            "topologyAssignment": {"levels": ["kubernetes.io/hostname"], "slices": [{
                "domainCount": 16, "valuesPerLevel": [{"individual": {"prefix": "node-", "roots": [h[5:] for h in hosts]}}],
                "podCounts": {"universal": 1}}]}}]},
            "conditions": [{"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": TS}
                           for t in ("QuotaReserved", "Admitted")]},
    }


def podgroup(i: int, phase: str = "Scheduling", running: int = 0) -> dict[str, Any]:
    ns, job = f"team-{i % 50}", f"train-{i}"
    meta: dict[str, Any] = {"name": job, "namespace": ns, "uid": f"pg-{i}", "creationTimestamp": TS}
    if i % 3 == 1:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"job-{i}", "controller": True}]
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": meta,
            "spec": {"minMember": 16, "scheduleTimeoutSeconds": 600},
            "status": {"phase": phase, "running": running}}


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=20_000)
    ap.add_argument("--events", type=int, default=20_000)
    args = ap.parse_args()
    n = args.workloads
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    wls = [workload(i) for i in range(n)]
    pgs = [podgroup(i) for i in range(n)]
    expo = Exposition()
    store = ClusterStore(expo)
    gangs = attach_gangs(store, clock=lambda: 1787220000.0)
    wl_handler, pg_handler = store.handlers()["workloads"], gangs.handlers()["podgroups_coscheduling"]
    gc.collect()

    t = time.perf_counter()
    wl_handler.replace(wls)
    t_wl = time.perf_counter() - t
    t = time.perf_counter()
    pg_handler.replace(pgs)
    t_pg = time.perf_counter() - t
    joined = sum(1 for g in gangs.gangs.values() if g.workload is not None)
    assert joined == n, f"only {joined} of {n} PodGroups joined"
    del wls, pgs  # what the informer handed over is gone after a LIST; the records remain
    gc.collect()
    rss_synced = current_rss_mb()

    events = [podgroup(i % n, phase="Running" if (i // n) % 2 == 0 else "Scheduling", running=16 if (i // n) % 2 == 0 else 0)
              for i in range(args.events)]
    t = time.perf_counter()
    for obj in events:
        pg_handler.apply("MODIFIED", obj)
    t_pg_ev = time.perf_counter() - t

    wl_events = []
    for i in range(min(args.events, n)):
        w = workload(i)
        w["metadata"]["resourceVersion"] = str(n + i)
        wl_events.append(w)
    t = time.perf_counter()
    for obj in wl_events:
        wl_handler.apply("MODIFIED", obj)
    t_wl_ev = time.perf_counter() - t

    t = time.perf_counter()
    body = expo.render(False)
    t_first = time.perf_counter() - t
    t = time.perf_counter()
    expo.render(False)
    t_scrape = time.perf_counter() - t

    print(f"objects                 {n} Workloads (16 hosts each) + {n} PodGroups, {joined} joined")
    print(f"sync workloads          {t_wl:.2f} s ({n / t_wl:,.0f}/s)")
    print(f"sync podgroups + join   {t_pg:.2f} s ({n / t_pg:,.0f}/s)")
    print(f"PodGroup watch event    {t_pg_ev / len(events) * 1e6:.0f} us -> {len(events) / t_pg_ev:,.0f} events/s (parse, join, re-render)")
    print(f"Workload watch event    {t_wl_ev / len(wl_events) * 1e6:.0f} us -> {len(wl_events) / t_wl_ev:,.0f} events/s (store + gang join)")
    print(f"render after events     {t_first * 1e3:.0f} ms; unchanged scrape {t_scrape * 1e3:.1f} ms; {len(body) / 1e6:.1f} MB")
    print(f"RSS after sync          {rss_synced:.0f} MiB (store, gang index, exposition; inputs freed)")
    print(f"max RSS                 {rss_mb():.0f} MB (includes the benchmark's own input and event objects)")


if __name__ == "__main__":
    main()
