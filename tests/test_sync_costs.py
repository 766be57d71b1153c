"""What the collector's work costs, counted in calls rather than timed (bench/collector.py times it).

The first sync of a realistic cluster (bench/cluster.py) through the real collector wiring and
the simulated API server: every Workload is rendered once (the Nodes and Topologies list first),
every gang judged once (the PodGroups list after the Workloads they join), every capacity domain
rendered once (held until the sync is in).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.cluster import gangs as gangs_module
from exporter.cluster import store as store_module
from exporter.cluster.capacity import Capacity
from exporter.kube.resources import (
    COSCHEDULING_PODGROUPS, LOCAL_QUEUES, NODES, RESOURCE_FLAVORS, TOPOLOGIES, WORKLOADS,
)
from exporter.sim.apiserver import SimApiServer
from collectors import make_collector

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from cluster import build_cluster  # noqa: E402


def counted(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, calls: Counter) -> None:
    """Count the calls of ``owner.name`` (a module's function or a class's method) in ``calls[name]``."""
    real: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)


async def test_the_first_sync_renders_and_judges_each_object_once(
        kube_sim: SimApiServer, kube_sim_kubeconfig: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = build_cluster(300, nodes=512, seed=3, namespaces=20)
    for r in (WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, RESOURCE_FLAVORS, NODES, COSCHEDULING_PODGROUPS):
        kube_sim.serve(r)
    kube_sim.bulk_load(cluster.objects())
    calls: Counter = Counter()
    counted(monkeypatch, gangs_module, "evaluate", calls)
    counted(monkeypatch, store_module, "render_workload", calls)
    counted(monkeypatch, Capacity, "_render_domain", calls)
    collector = make_collector(kube_sim_kubeconfig, "--queue-position-interval", "0")
    await collector.start()
    try:
        await collector.wait_ready(60)
        domains = sum(len(d) for d in collector.store.capacity._domains)
        assert (calls["render_workload"], calls["evaluate"], calls["_render_domain"]) == (300, 300, domains)
        assert len(collector.store.workloads) == len(collector.gangs.gangs) == 300 and domains > 512
    finally:
        await collector.stop()
