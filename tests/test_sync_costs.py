"""What the collector's work costs, counted in calls rather than timed (bench/collector.py times it).

The first sync of a realistic cluster (bench/cluster.py) through the real collector wiring and
the simulated API server: every Workload is rendered once (the Nodes and Topologies list first),
every gang judged once (the PodGroups list after the Workloads they join), every capacity domain
rendered once (held until the sync is in). After it, an event that changes nothing gangscope
reads (a new resourceVersion, rewritten managedFields) is dropped before it is parsed, and leaves
the page and every gzip block as they were. A pod two watches see is parsed once, and a family
--metric-denylist leaves out is never formatted.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.cluster import gangs as gangs_module
from exporter.cluster import pods as pods_module
from exporter.cluster import store as store_module
from exporter.cluster.capacity import Capacity
from exporter.cluster.collector import build_collector
from exporter.cluster.pods import PodStore
from exporter.exposition import Block, Exposition, Family
from exporter.health import SourceHealth
from exporter.kube.resources import (
    COSCHEDULING_PODGROUPS, LOCAL_QUEUES, NODES, RESOURCE_FLAVORS, TOPOLOGIES, WORKLOADS,
)
from exporter.sim.apiserver import SimApiServer
from collectors import make_collector
from test_gang_evidence import pod

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
    health_render = SourceHealth._render

    def health(self: SourceHealth) -> None:
        calls[f"health:{self.name}"] += 1
        health_render(self)

    monkeypatch.setattr(SourceHealth, "_render", health)
    collector = make_collector(kube_sim_kubeconfig, "--queue-position-interval", "0")
    await collector.start()
    try:
        await collector.wait_ready(60)
        domains = sum(len(d) for d in collector.store.capacity._domains)
        assert (calls["render_workload"], calls["evaluate"], calls["_render_domain"]) == (300, 300, domains)
        # The PodGroups' LIST sets its source's object count once, not once per object.
        assert calls["health:podgroups_coscheduling"] < 10
        assert len(collector.store.workloads) == len(collector.gangs.gangs) == 300 and domains > 512
    finally:
        await collector.stop()


def _fed_collector(n: int) -> tuple[Any, dict[str, Any], Any]:
    """The offline collector (``gangscope snapshot``'s wiring) holding a bench cluster of ``n`` Workloads."""
    cluster = build_cluster(n, nodes=256, seed=5, namespaces=10)
    expo = Exposition()
    _, handlers, _ = build_collector(expo)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in cluster.objects():
        by_kind.setdefault(obj["kind"], []).append(obj)
    for source, kind in (("topologies", "Topology"), ("resourceflavors", "ResourceFlavor"), ("nodes", "Node"),
                         ("localqueues", "LocalQueue"), ("workloads", "Workload"), ("podgroups_coscheduling", "PodGroup")):
        handlers[source].replace(by_kind.get(kind, []))
    return expo, handlers, by_kind


def _blocks(expo: Exposition) -> list[tuple[int, int]]:
    return [(id(b), b.version) for b in expo.render_blocks(False) if isinstance(b, Block)]


def test_an_event_that_changes_nothing_read_is_not_parsed_and_moves_no_gzip_block(monkeypatch: pytest.MonkeyPatch) -> None:
    expo, handlers, by_kind = _fed_collector(60)
    page, blocks = expo.render(False), _blocks(expo)
    calls: Counter = Counter()
    counted(monkeypatch, store_module, "read_workload", calls)
    real_podgroup = gangs_module.pg.PARSERS["podgroups_coscheduling"]

    def podgroup(*args: Any) -> Any:
        calls["parse_podgroup"] += 1
        return real_podgroup(*args)

    monkeypatch.setitem(gangs_module.pg.PARSERS, "podgroups_coscheduling", podgroup)
    for source, kind in (("workloads", "Workload"), ("podgroups_coscheduling", "PodGroup")):
        for obj in by_kind[kind]:
            meta = obj["metadata"]
            handlers[source].apply("MODIFIED", obj | {"metadata": meta | {
                "resourceVersion": str(int(meta.get("resourceVersion", "1")) + 1000),
                "managedFields": [{"manager": "kueue", "operation": "Update", "time": "2026-12-01T00:00:00Z"}]}})
    assert expo.render(False) == page and _blocks(expo) == blocks
    assert calls == Counter()
    # A change that is read is parsed, and moves only the blocks its lines are in.
    wl = by_kind["Workload"][0]
    handlers["workloads"].apply("MODIFIED", wl | {"spec": wl["spec"] | {"queueName": "another-queue"}})
    assert calls == Counter(read_workload=1)
    assert expo.render(False) != page
    assert 0 < sum(a != b for a, b in zip(_blocks(expo), blocks)) < len(blocks) / 2


def formatting_counted(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Family name -> calls of every Family method that formats a line (prefix, sample, head, tail,
    line, lines), counted from now on."""
    formatted: Counter = Counter()
    for method in ("prefix", "sample", "head", "tail", "line", "lines"):
        real = getattr(Family, method)

        def wrapper(self: Family, *args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
            formatted[self.name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(Family, method, wrapper)
    return formatted


def test_denied_families_are_never_formatted(monkeypatch: pytest.MonkeyPatch) -> None:
    denied = {"gangscope_gang_info", "gangscope_gang_stage", "gangscope_gang_assembly_stuck", "gangscope_gang_pods",
              "gangscope_gang_idle_gpus", "gangscope_gang_assembly_deadline_timestamp_seconds",
              "gangscope_gang_idle_gpu_seconds_total", "gangscope_podgroup_phase", "gangscope_podgroup_info",
              "gangscope_podgroup_min_member", "gangscope_podgroup_pods", "gangscope_workload_info",
              "gangscope_domain_gpus", "gangscope_workload_domains_spanned", "gangscope_workload_pending_reason"}
    formatted = formatting_counted(monkeypatch)
    cluster = build_cluster(60, nodes=256, seed=5, namespaces=10)
    expo = Exposition(exported=lambda name: name not in denied)
    _, handlers, _ = build_collector(expo)
    kinds = {"Topology": "topologies", "ResourceFlavor": "resourceflavors", "Node": "nodes", "LocalQueue": "localqueues",
             "Workload": "workloads", "PodGroup": "podgroups_coscheduling"}
    for kind, source in kinds.items():
        handlers[source].replace([o for o in cluster.objects() if o["kind"] == kind])
    assert sorted(denied & set(formatted)) == []
    assert {"gangscope_workload_stage", "gangscope_workload_locality_ratio", "gangscope_podgroup_phase_timestamp_seconds",
            "gangscope_domain_placeable_pods"} <= set(formatted)
    page = expo.render(False).decode()
    assert all(f"\n{name}{{" not in page and not page.startswith(f"{name}{{") for name in denied)


def test_a_pod_seen_by_two_watches_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: Counter = Counter()
    counted(monkeypatch, pods_module, "parse_pod", calls)
    store = PodStore()
    h = store.handlers()
    labels = {"kueue.x-k8s.io/podset": "m", "scheduling.x-k8s.io/pod-group": "g"}
    h["pods_kueue"].replace([pod("a", labels=labels, rv="5")])
    h["pods_coscheduling"].replace([pod("a", labels=labels, rv="5")])
    assert calls["parse_pod"] == 1 and list(store.pods) == ["uid-ml-a"]
    h["pods_kueue"].apply("MODIFIED", pod("a", labels=labels, phase="Running", rv="6"))
    h["pods_coscheduling"].apply("MODIFIED", pod("a", labels=labels, phase="Running", rv="6"))
    assert calls["parse_pod"] == 2 and store.pods["uid-ml-a"].phase == "Running"
    h["pods_kueue"].apply("DELETED", pod("a", labels=labels, phase="Running", rv="7"))
    assert "uid-ml-a" in store.pods  # still the gang's pod


def test_denied_job_ray_and_cluster_queue_families_are_never_formatted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job controllers', KubeRay's and the ClusterQueues' families too: denied, they are never
    formatted; the families left in are."""
    from kueue_objects import cluster_queue
    from test_jobs import jobset02, trainjob
    from test_training import ray_cluster_setup

    denied = {"gangscope_job_info", "gangscope_job_condition", "gangscope_job_progress_ratio",
              "gangscope_ray_cluster_info", "gangscope_ray_job_status", "gangscope_cluster_queue_nominal_quota",
              "gangscope_cluster_queue_active"}
    formatted = formatting_counted(monkeypatch)
    expo = Exposition(exported=lambda name: name not in denied)
    _, handlers, _ = build_collector(expo)
    _, rayjob, raycluster = ray_cluster_setup()
    handlers["clusterqueues"].replace([cluster_queue("cq", reserved=8, used=8)])
    handlers["jobsets"].replace([jobset02()])
    handlers["trainjobs"].replace([trainjob(40, 1.8e9)])
    handlers["rayjobs"].replace([rayjob])
    handlers["rayclusters"].replace([raycluster])
    assert sorted(denied & set(formatted)) == []
    assert {"gangscope_job_progress_updated_timestamp_seconds", "gangscope_ray_cluster_workers",
            "gangscope_cluster_queue_flavor_info", "gangscope_cluster_queue_reserved"} <= set(formatted)
    page = expo.render(False).decode()
    assert all(f"\n{name}{{" not in page and not page.startswith(f"{name}{{") for name in denied)


def test_retired_workloads_are_not_placed_nor_indexed_by_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most of a cluster's Workloads are finished: they export a summary, so the store neither
    places them nor indexes their hosts, and a Node's change re-renders none of them."""
    calls: Counter = Counter()
    counted(monkeypatch, store_module.ClusterStore, "place", calls)
    cluster = build_cluster(200, nodes=256, seed=5, namespaces=10)
    expo = Exposition()
    store, handlers, _ = build_collector(expo)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in cluster.objects():
        by_kind.setdefault(obj["kind"], []).append(obj)
    for source, kind in (("topologies", "Topology"), ("resourceflavors", "ResourceFlavor"), ("nodes", "Node"),
                         ("localqueues", "LocalQueue"), ("workloads", "Workload")):
        handlers[source].replace(by_kind[kind])
    retired = {k for k, wl in store.workloads.items() if not wl.detail}
    assert len(retired) > 100
    placed = sum(1 for wl in store.workloads.values() if wl.detail for a in wl.last_assignments if a.domains)
    assert calls["place"] == placed
    indexed = {k for keys in store._by_group.values() for k in keys}
    assert indexed and not indexed & retired
    # a Node's new rack re-renders the Workloads placed on it, and only those
    node = next(n for n in by_kind["Node"] if any(
        store._by_host.of(n["metadata"]["labels"]["kubernetes.io/hostname"])))
    renders: Counter = Counter()
    counted(monkeypatch, store_module, "render_workload", renders)
    node["metadata"]["labels"]["cloud.provider.com/topology-rack"] = "moved"
    handlers["nodes"].apply("MODIFIED", node)
    assert 0 < renders["render_workload"] <= len(store.workloads) - len(retired)
