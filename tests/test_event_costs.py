"""What one watch event costs under churn, counted in lines formatted rather than timed
(bench/churn.py times it): an event renders the lines it changed, never every line of a queue or
of the cluster's domains. Both tests fail on the code they replaced: an admission re-rendered its
ClusterQueue's every position, and an eviction re-rendered every domain's eviction counter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import pytest

from exporter.cluster.clusterqueues import QueuePosition
from exporter.cluster.collector import build_collector
from exporter.cluster.queue_positions import QueuePositionPoller
from exporter.exposition import Exposition
from kueue_objects import admitted_conditions, cond, local_queue, node, sample, series, topology, workload
from test_sync_costs import formatting_counted

PENDING = [cond("QuotaReserved", "False", "Pending")]


def lines_set(monkeypatch: pytest.MonkeyPatch, expo: Exposition) -> Counter:
    """Family name -> lines handed to ``expo.set`` from now on (rendered or cached alike)."""
    handed: Counter = Counter()
    real = expo.set

    def counting(owner: Hashable, lines: Mapping[Any, Sequence[Any]]) -> None:
        for fam, fam_lines in lines.items():
            handed[fam.name] += sum(line.count("\n" if isinstance(line, str) else b"\n") for line in fam_lines)
        real(owner, lines)

    monkeypatch.setattr(expo, "set", counting)
    return handed


def test_an_admission_renders_no_other_workloads_queue_position(monkeypatch: pytest.MonkeyPatch) -> None:
    expo = Exposition()
    store, h, _ = build_collector(expo)
    h["localqueues"].replace([local_queue("q", "team", "cq")])
    h["workloads"].replace([workload(f"w{i}", hosts=[], admitted_cq=None, conditions=PENDING) for i in range(200)])
    poller = QueuePositionPoller(None, store, expo)  # type: ignore[arg-type]
    poller._set({("team", f"w{i}"): QueuePosition("cq", i, 200, True, "q", i, 0.0) for i in range(200)})
    positions = {k: v for k, v in series(expo.render(False).decode()).items() if k[0] == "gangscope_workload_queue_position"}
    assert len(positions) == 200
    formatted = formatting_counted(monkeypatch)
    h["workloads"].apply("MODIFIED", workload("w7", conditions=admitted_conditions()))
    assert formatted["gangscope_workload_queue_position"] == formatted["gangscope_workload_local_queue_position"] == 0
    after = {k: v for k, v in series(expo.render(False).decode()).items() if k[0] == "gangscope_workload_queue_position"}
    del positions[sample("gangscope_workload_queue_position", namespace="team", workload="w7", cluster_queue="cq")]
    assert after == positions  # its own position went at once, the others' stay until the next poll


def test_an_eviction_renders_only_the_counters_it_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    expo = Exposition()
    _, h, _ = build_collector(expo)
    h["topologies"].replace([topology()])
    racks = [f"r{i}" for i in range(100)]
    h["nodes"].replace([node(f"h-{r}", "b1", r) for r in racks])
    admitted = [workload(f"w-{r}", hosts=[f"h-{r}"], conditions=admitted_conditions()) for r in racks]
    h["workloads"].replace(admitted)

    def evicted(wl: dict, count: int) -> dict:
        status = {**wl["status"], "schedulingStats": {"evictions": [
            {"reason": "Preempted", "underlyingCause": "", "count": count}]},
            "conditions": [*admitted_conditions(), cond("Evicted", "True", "Preempted", "2026-08-20T11:00:00Z")]}
        return {**wl, "status": status}

    for wl in admitted:  # one eviction in each of the 100 racks: 100 counters
        h["workloads"].apply("MODIFIED", evicted(wl, 1))
    counters = {k: v for k, v in series(expo.render(False).decode()).items() if k[0] == "gangscope_topology_evictions_total"}
    assert len(counters) == 100 and set(counters.values()) == {1}
    handed = lines_set(monkeypatch, expo)
    h["workloads"].apply("MODIFIED", evicted(admitted[3], 2))
    assert handed["gangscope_topology_evictions_total"] == 1
    after = {k: v for k, v in series(expo.render(False).decode()).items() if k[0] == "gangscope_topology_evictions_total"}
    assert {k: v for k, v in after.items() if after[k] != counters[k]} == {
        sample("gangscope_topology_evictions_total", reason="Preempted", underlying_cause="", block="b1", rack="r3"): 2}
    assert Counter(after.values()) == Counter({1: 99, 2: 1})
