"""Workload parsing, stages and rendering through the store: objects in, exposition text out."""

from __future__ import annotations

import copy

import pytest

from exporter.cluster.collector import build_collector
from exporter.cluster.workloads import parse_workload
from exporter.exposition import Exposition
from exporter.health import SourceHealth
from kueue_objects import (
    BLOCK, HOST, RACK, admitted_conditions, cond, fixture, local_queue, modified, node, sample, series, topology, workload,
)


def collector(**kwargs):
    expo = Exposition()
    store, handlers, _ = build_collector(expo, **kwargs)
    for name, h in handlers.items():
        h.health = SourceHealth(name, expo)
    return expo, store, handlers


def text(expo: Exposition) -> str:
    return expo.render(False).decode()


def workload_series(expo: Exposition) -> dict:
    return {k: v for k, v in series(text(expo)).items() if not k[0].startswith(("gangscope_source_", "gangscope_parse"))}


def parse_errors(expo: Exposition, source: str) -> float:
    return series(text(expo))[sample("gangscope_parse_errors_total", source=source)]


def test_exact_lines_of_one_workload() -> None:
    expo, _, h = collector()
    h["topologies"].replace([topology()])
    h["nodes"].replace([node("h1", "b1", "r1"), node("h2", "b1", "r2")])
    h["workloads"].replace([workload(conditions=admitted_conditions(),
                                     evictions=[{"reason": "Preempted", "underlyingCause": "", "count": 2}])])
    lines = [line for line in text(expo).splitlines() if line.startswith("gangscope_workload") or
             line.startswith("gangscope_topology")]
    nw = 'namespace="team",workload="wl"'
    assert lines == [
        f'gangscope_workload_info{{{nw},cluster_queue="cq",local_queue="q",priority_class="high",owner_kind="Job",'
        'owner_name="job-wl",worker_cluster="",nominated_worker_clusters=""} 1',
        f'gangscope_workload_stage{{{nw},stage="running"}} 1',
        f'gangscope_workload_condition{{{nw},type="QuotaReserved",status="True",reason="QuotaReserved"}} 1',
        f'gangscope_workload_condition{{{nw},type="Admitted",status="True",reason="Admitted"}} 1',
        f'gangscope_workload_condition{{{nw},type="PodsReady",status="True",reason="Started"}} 1',
        f"gangscope_workload_created_timestamp_seconds{{{nw}}} 1787216403",
        f"gangscope_workload_quota_reserved_timestamp_seconds{{{nw}}} 1787220312",
        f"gangscope_workload_admitted_timestamp_seconds{{{nw}}} 1787220312",
        f"gangscope_workload_pods_ready_timestamp_seconds{{{nw}}} 1787220460",
        f'gangscope_workload_evictions_total{{{nw},reason="Preempted",underlying_cause=""}} 2',
        f"gangscope_workload_requested_gpus{{{nw}}} 16",
        f'gangscope_workload_topology_pods{{{nw},podset="main",block="b1",rack="r1",host="h1"}} 1',
        f'gangscope_workload_topology_pods{{{nw},podset="main",block="b1",rack="r2",host="h2"}} 1',
        # one pod on each of h1 (rack r1) and h2 (rack r2), both in block b1
        f'gangscope_workload_domains_spanned{{{nw},podset="main",level="block"}} 1',
        f'gangscope_workload_domains_spanned{{{nw},podset="main",level="rack"}} 2',
        f'gangscope_workload_locality_ratio{{{nw},podset="main",level="block"}} 1',
        f'gangscope_workload_locality_ratio{{{nw},podset="main",level="rack"}} 0.5',
    ]


def test_fixtures_of_both_api_versions_give_the_same_series() -> None:
    results = []
    for name in ("workload-v1beta1-admitted-tas.yaml", "workload-v1beta2-admitted-tas.yaml"):
        expo, store, h = collector()
        h["workloads"].replace(fixture(name))
        results.append(workload_series(expo))
        wl = store.workload("ml-team", "job-llama-train-f48ba")
        assert wl is not None and wl.priority_class == "training-high" and wl.stage == "running"
        assert wl.owner is not None and (wl.owner.kind, wl.owner.name) == ("Job", "llama-train")
        assert [d.values[0] for d in wl.assignments[0].domains][:2] == [
            "gke-ml-a3mega-pool-1-5d2f7a1c-35l9", "gke-ml-a3mega-pool-1-5d2f7a1c-avsy"]
        assert parse_errors(expo, "workloads") == 0
    assert results[0] == results[1]
    s = results[1]
    assert s[sample("gangscope_workload_requested_gpus", namespace="ml-team", workload="job-llama-train-f48ba")] == 128
    pods = [k for k in s if k[0] == "gangscope_workload_topology_pods"]
    assert len(pods) == 16


def _stage_of(obj) -> str:
    _, store, h = collector()
    h["workloads"].replace([obj])
    return store.workload(obj["metadata"]["namespace"], obj["metadata"]["name"]).stage


FINISHED_AT = "2026-08-20T11:00:00Z"  # 1787223600


def finished_workload(**kwargs):
    return workload(conditions=[*admitted_conditions(), cond("Finished", "True", "Succeeded", FINISHED_AT)],
                    evictions=[{"reason": "Preempted", "underlyingCause": "", "count": 1}],
                    topology={"required": "cloud.provider.com/topology-rack"}, **kwargs)


def test_a_finished_workload_keeps_its_summary_only() -> None:
    """Identity, stage, outcome, times, requested GPUs and evictions: 9 series, no placement."""
    expo, _, h = collector()
    h["topologies"].replace([topology()])
    h["nodes"].replace([node("h1", "b1", "r1"), node("h2", "b1", "r2")])
    h["workloads"].replace([finished_workload()])
    nw = 'namespace="team",workload="wl"'
    assert [line for line in text(expo).splitlines() if line.startswith("gangscope_workload")] == [
        f'gangscope_workload_info{{{nw},cluster_queue="cq",local_queue="q",priority_class="high",owner_kind="Job",'
        'owner_name="job-wl",worker_cluster="",nominated_worker_clusters=""} 1',
        f'gangscope_workload_stage{{{nw},stage="finished"}} 1',
        f'gangscope_workload_condition{{{nw},type="Finished",status="True",reason="Succeeded"}} 1',
        f"gangscope_workload_created_timestamp_seconds{{{nw}}} 1787216403",
        f"gangscope_workload_quota_reserved_timestamp_seconds{{{nw}}} 1787220312",
        f"gangscope_workload_admitted_timestamp_seconds{{{nw}}} 1787220312",
        f"gangscope_workload_pods_ready_timestamp_seconds{{{nw}}} 1787220460",
        f"gangscope_workload_finished_timestamp_seconds{{{nw}}} 1787223600",
        f'gangscope_workload_evictions_total{{{nw},reason="Preempted",underlying_cause=""}} 1',
        f"gangscope_workload_requested_gpus{{{nw}}} 16",
    ]


def test_finished_detail_keeps_the_detail_for_its_window() -> None:
    """--finished-detail 600: placement and request stay for 10 minutes from the Finished
    condition's time, then go (offline: judged at the clock of the evaluation)."""
    clock = [1787223600.0 + 599]
    expo, store, h = collector(finished_detail=600)
    store.clock = lambda: clock[0]
    h["topologies"].replace([topology()])
    h["nodes"].replace([node("h1", "b1", "r1"), node("h2", "b1", "r2")])
    h["workloads"].replace([finished_workload()])
    names = {k[0] for k in series(text(expo))}
    assert {"gangscope_workload_topology_request", "gangscope_workload_domains_spanned"} <= names
    assert "gangscope_workload_topology_pods" not in names  # a finished Workload holds no host
    assert len([k for k in series(text(expo)) if k[0] == "gangscope_workload_condition"]) == 4
    clock[0] += 1
    store.refresh(("team", "wl"))  # the collector's timer does this at the window's end
    names = {k[0] for k in series(text(expo))}
    assert "gangscope_workload_topology_request" not in names and "gangscope_workload_domains_spanned" not in names


def test_finished_detail_timer_drops_the_detail() -> None:
    """In the collector the window's end is a timer: no event needed to drop the detail."""
    import asyncio

    async def main() -> None:
        clock = [1787223600.0 + 599.99]
        expo, store, h = collector(finished_detail=600)
        store.clock = lambda: clock[0]
        h["topologies"].replace([topology()])
        h["workloads"].replace([finished_workload()])
        store.start_timers()
        try:
            assert sample("gangscope_workload_topology_request", namespace="team", workload="wl", podset="main",
                          mode="required", level="rack") in series(text(expo))
            clock[0] += 0.01
            await asyncio.sleep(0.05)
            assert "gangscope_workload_topology_request" not in {k[0] for k in series(text(expo))}
        finally:
            store.stop_timers()

    asyncio.run(main())


def test_evicted_workload_keeps_its_last_placement_until_it_finishes() -> None:
    """Waiting to be admitted again after an eviction, the last placement stays (the eviction
    alerts route by its domains); once finished, it goes."""
    expo, _, h = collector()
    h["topologies"].replace([topology()])
    h["nodes"].replace([node("h1", "b1", "r1"), node("h2", "b1", "r2")])
    h["workloads"].replace([workload(conditions=admitted_conditions())])
    evicted = workload(admitted_cq=None, conditions=[cond("QuotaReserved", "False", "Pending"),
                                                     cond("Evicted", "True", "Preempted")])
    h["workloads"].apply("MODIFIED", evicted)
    pods = lambda: [dict(k[1])["host"] for k in series(text(expo)) if k[0] == "gangscope_workload_topology_pods"]  # noqa: E731
    assert sorted(pods()) == ["h1", "h2"]
    done = workload(admitted_cq=None, conditions=[cond("Finished", "True", "Failed")])
    h["workloads"].apply("MODIFIED", done)
    assert pods() == []


@pytest.mark.parametrize(("stage", "reason", "category", "obj"), [
    ("queued", "PendingEvaluation", "evaluation", workload(admitted_cq=None, conditions=[])),
    ("inadmissible", "Pending", "capacity", workload(admitted_cq=None, conditions=[cond("QuotaReserved", "False", "Pending")])),
    ("inadmissible", "NoMatchingFlavor", "configuration",
     workload(admitted_cq=None, conditions=[cond("QuotaReserved", "False", "NoMatchingFlavor")])),
    ("preempting", "WaitingForPreemptedWorkloads", "preemption",
     workload(admitted_cq=None, conditions=[cond("QuotaReserved", "False", "WaitingForPreemptedWorkloads")])),
    ("held", "AdmissionGated", "policy", workload(admitted_cq=None, conditions=[cond("QuotaReserved", "False", "AdmissionGated")])),
    ("admission_checks", "UnsatisfiedAdmissionChecks", "admission_check",
     workload(conditions=[cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "False", "UnsatisfiedAdmissionChecks")])),
    ("running", None, None, workload(conditions=admitted_conditions(ready=False))),  # no PodsReady: no waitForPodsReady
    ("assembling", None, None, workload(conditions=[*admitted_conditions(ready=False), cond("PodsReady", "False", "WaitForStart")])),
    ("deactivated", "Deactivated", "policy", workload(active=False, conditions=admitted_conditions())),
    ("finished", None, None, workload(active=False, conditions=[*admitted_conditions(), cond("Finished", "True", "Succeeded")])),
])
def test_stage_and_pending_reason_series(stage: str, reason: str | None, category: str | None, obj) -> None:
    """The current stage (one series, value 1) and the pending reason as exported (the rules:
    test_workload_state.py)."""
    expo, _, h = collector()
    h["workloads"].replace([obj])
    s = series(text(expo))
    assert [(dict(k[1])["stage"], v) for k, v in s.items() if k[0] == "gangscope_workload_stage"] == [(stage, 1)]
    got = [dict(k[1]) for k in s if k[0] == "gangscope_workload_pending_reason"]
    assert got == ([{"namespace": "team", "workload": "wl", "reason": reason, "category": category}] if reason else [])


def test_fixture_node_failure_timeline() -> None:
    base = fixture("workload-v1beta2-admitted-tas.yaml")[0]
    unhealthy, evicted = fixture("workload-v1beta2-tas-node-failure.yaml")
    assert [_stage_of(o) for o in (base, unhealthy, evicted)] == ["running", "recovering", "queued"]  # stages alone
    expo, store, h = collector()
    h["topologies"].replace([topology()])
    h["nodes"].replace([node("gke-ml-a3mega-pool-1-5d2f7a1c-jn2q", "b1", "r1")])
    h["workloads"].replace([base])
    h["workloads"].apply("MODIFIED", unhealthy)
    s = series(text(expo))
    nw = {"namespace": "ml-team", "workload": "job-llama-train-f48ba"}
    assert s[sample("gangscope_workload_unhealthy_node", **nw, block="b1", rack="r1",
                    host="gke-ml-a3mega-pool-1-5d2f7a1c-jn2q")] == 1
    h["workloads"].apply("MODIFIED", evicted)
    h["workloads"].apply("MODIFIED", evicted)  # a repeated MODIFIED is not a second eviction
    s = series(text(expo))
    assert not [k for k in s if k[0] == "gangscope_workload_unhealthy_node"]
    # the assignment is gone from the object, but its pods are still exported from the cache ...
    assert len([k for k in s if k[0] == "gangscope_workload_topology_pods"]) == 16
    assert store.workload("ml-team", "job-llama-train-f48ba").assignments == ()
    # ... and the NodeFailures eviction lands in the failed node's rack only (its unhealthyNodes before
    # the eviction patch cleared them, evict.go:205-209), not in the racks of the 15 healthy hosts
    evictions = {k: v for k, v in s.items() if k[0] == "gangscope_topology_evictions_total"}
    assert evictions == {
        sample("gangscope_topology_evictions_total", reason="NodeFailures", underlying_cause="", block="b1", rack="r1"): 1,
    }
    assert store.workload("ml-team", "job-llama-train-f48ba").failed_nodes == ("gke-ml-a3mega-pool-1-5d2f7a1c-jn2q",)
    assert s[sample("gangscope_workload_evictions_total", **nw, reason="NodeFailures", underlying_cause="")] == 1


# (Evicted condition reason, schedulingStats reason, underlyingCause) as Kueue writes them together:
# evict.go:178-185 sets the condition and increments the stats in one patch; a deactivation's
# condition reason is Deactivated + "DueTo" + cause, its stats entry Deactivated with the cause
# apart (evict.go:181-182; workload_controller_eviction_test.go:689, 700-703).
EVICTION_REASONS = [
    ("Preempted", "Preempted", ""), ("PodsReadyTimeout", "PodsReadyTimeout", "WaitForStart"),
    ("PodsReadyTimeout", "PodsReadyTimeout", "WaitForRecovery"), ("AdmissionCheck", "AdmissionCheck", ""),
    ("ClusterQueueStopped", "ClusterQueueStopped", ""), ("LocalQueueStopped", "LocalQueueStopped", ""),
    ("NodeFailures", "NodeFailures", ""), ("Deactivated", "Deactivated", ""),
    ("DeactivatedDueToRequeuingLimitExceeded", "Deactivated", "RequeuingLimitExceeded"),
    ("DeactivatedDueToAdmissionCheck", "Deactivated", "AdmissionCheck"),
    ("DeactivatedDueToMaximumExecutionTimeExceeded", "Deactivated", "MaximumExecutionTimeExceeded"),
    ("EvictedOnManagerCluster", "EvictedOnManagerCluster", ""), ("WorkloadSliceReplaced", "WorkloadSliceReplaced", ""),
    ("FlavorMigration", "FlavorMigration", ""), ("SomeFutureReason", "SomeFutureReason", "x"),
]


@pytest.mark.parametrize(("condition_reason", "reason", "cause"), EVICTION_REASONS)
def test_every_eviction_reason_counted_once(condition_reason: str, reason: str, cause: str) -> None:
    expo, _, h = collector()
    running = workload(conditions=admitted_conditions())
    h["workloads"].replace([running])
    evicted = workload(conditions=[*admitted_conditions(), cond("Evicted", "True", condition_reason, "2026-08-20T11:00:00Z")],
                       evictions=[{"reason": reason, "underlyingCause": cause, "count": 1}])
    h["workloads"].apply("MODIFIED", evicted)
    s = series(text(expo))
    assert s[sample("gangscope_workload_evictions_total", namespace="team", workload="wl", reason=reason,
                    underlying_cause=cause)] == 1
    per_domain = {k: v for k, v in s.items() if k[0] == "gangscope_topology_evictions_total"}
    # without Topologies the hostname is the only level, so the domains are the hosts
    assert per_domain == {sample("gangscope_topology_evictions_total", reason=reason, underlying_cause=cause, host=h): 1
                          for h in ("h1", "h2")}


def _topology_evictions(expo: Exposition) -> float:
    return series(text(expo)).get(
        sample("gangscope_topology_evictions_total", reason="Preempted", underlying_cause="", host="h1"), 0)


@pytest.mark.parametrize("order", ["condition_first", "stats_first", "together"])
def test_each_eviction_counted_once_whatever_the_signal_order(order: str) -> None:
    expo, _, h = collector()
    base = workload(conditions=admitted_conditions())
    h["workloads"].replace([base])
    evicted_cond = [*admitted_conditions(), cond("Evicted", "True", "Preempted", "2026-08-20T11:00:00Z")]
    stats = [{"reason": "Preempted", "underlyingCause": "", "count": 1}]
    steps = {
        "condition_first": [modified(base, conditions=evicted_cond), modified(base, conditions=evicted_cond, schedulingStats={"evictions": stats})],
        "stats_first": [modified(base, schedulingStats={"evictions": stats}), modified(base, conditions=evicted_cond, schedulingStats={"evictions": stats})],
        "together": [modified(base, conditions=evicted_cond, schedulingStats={"evictions": stats})],
    }[order]
    for step in steps:
        h["workloads"].apply("MODIFIED", step)
        h["workloads"].apply("MODIFIED", step)
    assert _topology_evictions(expo) == 1
    # a second eviction: the condition turns True again with a new transition time and the count rises
    again = modified(base, conditions=[*admitted_conditions(), cond("Evicted", "True", "Preempted", "2026-08-20T12:00:00Z")],
                     schedulingStats={"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 2}]})
    h["workloads"].apply("MODIFIED", again)
    assert _topology_evictions(expo) == 2


def test_evictions_already_in_the_first_sight_are_history_not_counted() -> None:
    expo, _, h = collector()
    h["workloads"].replace([workload(conditions=[*admitted_conditions(), cond("Evicted", "True", "Preempted")],
                                     evictions=[{"reason": "Preempted", "underlyingCause": "", "count": 3}])])
    assert _topology_evictions(expo) == 0


def test_hostname_assignment_filled_from_nodes_and_follows_node_changes() -> None:
    expo, store, h = collector()
    changed: list = []
    store.on_workload_change.append(changed.append)
    topo_changes: list = []
    store.on_topology_change.append(lambda: topo_changes.append(1))
    h["workloads"].replace([workload(conditions=admitted_conditions())])
    s = series(text(expo))
    assert s[sample("gangscope_workload_topology_pods", namespace="team", workload="wl", podset="main", host="h1")] == 1
    h["topologies"].replace([topology()])  # levels arrive after the Workload: re-rendered with block and rack
    h["nodes"].replace([node("h1", "b1", "r1"), node("h2", "b1", "r2"), node("other", "b2", "r3")])
    s = series(text(expo))
    key = sample("gangscope_workload_topology_pods", namespace="team", workload="wl", podset="main", block="b1", rack="r1", host="h1")
    assert s[key] == 1
    h["nodes"].apply("MODIFIED", node("h1", "b1", "r9"))  # relabelled
    s = series(text(expo))
    assert key not in s
    assert s[sample("gangscope_workload_topology_pods", namespace="team", workload="wl", podset="main", block="b1", rack="r9", host="h1")] == 1
    n = len(changed)
    h["nodes"].apply("MODIFIED", node("other", "b2", "r4"))  # not used by the Workload: no re-render
    h["nodes"].apply("MODIFIED", node("h2", "b1", "r2"))  # labels unchanged: no re-render
    assert len(changed) == n
    h["nodes"].apply("DELETED", node("h1", "b1", "r9"))
    s = series(text(expo))
    assert s[sample("gangscope_workload_topology_pods", namespace="team", workload="wl", podset="main", block="", rack="", host="h1")] == 1
    assert changed[-1] == ("team", "wl") and topo_changes
    assert store.levels.aliases == ("block", "rack", "host")


def test_node_name_differs_from_hostname_label() -> None:
    expo, _, h = collector(level_keys=(BLOCK, RACK))
    h["nodes"].replace([node("node-a", "b1", "r1", hostname="host-a")])
    h["workloads"].replace([workload(hosts=["host-a"], conditions=admitted_conditions(), unhealthy=["node-a"])])
    s = series(text(expo))
    assert s[sample("gangscope_workload_topology_pods", namespace="team", workload="wl", podset="main",
                    block="b1", rack="r1", host="host-a")] == 1
    assert s[sample("gangscope_workload_unhealthy_node", namespace="team", workload="wl", block="b1", rack="r1", host="host-a")] == 1


def test_flag_levels_override_topologies_and_aliases_apply() -> None:
    expo, store, h = collector(level_keys=(RACK,), alias_overrides={RACK: "pod_rack"})
    h["topologies"].replace([topology()])
    assert store.levels.aliases == ("pod_rack", "host")
    h["nodes"].replace([node("h1", "b1", "r1")])
    h["workloads"].replace([workload(hosts=["h1"], conditions=admitted_conditions())])
    assert series(text(expo))[sample("gangscope_workload_topology_pods", namespace="team", workload="wl", podset="main",
                                     pod_rack="r1", host="h1")] == 1


def test_several_topologies_merge_in_a_stable_order() -> None:
    for order in ([topology("a", (RACK, HOST)), topology("b", (BLOCK, RACK, HOST))],
                  [topology("b", (BLOCK, RACK, HOST)), topology("a", (RACK, HOST))]):
        _, store, h = collector()
        for t in order:
            h["topologies"].apply("ADDED", t)
        assert store.levels.keys == (BLOCK, RACK, HOST)


def test_colliding_overrides_are_counted_and_keep_the_old_levels() -> None:
    expo, store, h = collector(alias_overrides={"a.com/x": "rack", "b.com/y": "rack"})
    h["topologies"].replace([topology("a", ("a.com/x", "b.com/y", HOST))])
    assert store.levels.keys == (HOST,)
    assert parse_errors(expo, "topologies") == 1


def test_gke_four_level_topology_is_accepted_with_distinct_labels() -> None:
    gke = ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
           "cloud.google.com/gce-topology-host", HOST)
    expo, store, h = collector()
    h["topologies"].replace([topology("gke-default", gke)])
    assert store.levels.aliases == ("block", "subblock", "gce_topology_host", "host")
    assert parse_errors(expo, "topologies") == 0


def test_multi_level_assignment_with_two_podsets() -> None:
    obj = workload(conditions=admitted_conditions(), hosts=[])
    obj["status"]["admission"]["podSetAssignments"] = [
        {"name": "leader", "count": 1, "topologyAssignment": {"levels": [BLOCK, RACK], "domains": [{"values": ["b1", "r1"], "count": 1}]}},
        {"name": "workers", "count": 6, "topologyAssignment": {"levels": [BLOCK, RACK], "slices": [{
            "domainCount": 2, "valuesPerLevel": [{"universal": "b1"}, {"individual": {"prefix": "r", "roots": ["1", "2"]}}],
            "podCounts": {"individual": [4, 2]}}]}},
    ]
    expo, _, h = collector(level_keys=(BLOCK, RACK))
    h["workloads"].replace([obj])
    s = series(text(expo))
    got = {(dict(k[1])["podset"], dict(k[1])["rack"]): v for k, v in s.items() if k[0] == "gangscope_workload_topology_pods"}
    assert got == {("leader", "r1"): 1, ("workers", "r1"): 4, ("workers", "r2"): 2}


def test_cluster_queue_from_local_queue_while_pending() -> None:
    expo, store, h = collector()
    pending = workload(admitted_cq=None, queue="lq")
    h["workloads"].replace([pending])
    info = lambda: [dict(k[1]) for k in series(text(expo)) if k[0] == "gangscope_workload_info"][0]  # noqa: E731
    assert info()["cluster_queue"] == ""
    h["localqueues"].replace([local_queue("lq", "team", "gpu-cq")])
    assert info()["cluster_queue"] == "gpu-cq"
    h["localqueues"].apply("MODIFIED", local_queue("lq", "team", "other-cq"))
    assert info()["cluster_queue"] == "other-cq"
    h["workloads"].apply("MODIFIED", workload(queue="lq", admitted_cq="admitting-cq"))
    assert info()["cluster_queue"] == "admitting-cq"
    h["localqueues"].apply("DELETED", local_queue("lq", "team", "other-cq"))
    assert info()["cluster_queue"] == "admitting-cq"


def test_v1beta1_priority_class_name() -> None:
    wl = parse_workload(workload(version="v1beta1", priority="batch-low"))
    assert wl.priority_class == "batch-low" and wl.api_version == "kueue.x-k8s.io/v1beta1"


@pytest.mark.parametrize(("pod_spec", "resources", "gpus"), [
    ({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}, ("nvidia.com/gpu",), 4),
    ({"containers": [{"resources": {"requests": {"nvidia.com/gpu": 2}}}, {"resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
     ("nvidia.com/gpu",), 4),
    ({"containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}],
      "initContainers": [{"resources": {"requests": {"nvidia.com/gpu": "3"}}}]}, ("nvidia.com/gpu",), 3),
    ({"containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}],
      "initContainers": [{"restartPolicy": "Always", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}, ("nvidia.com/gpu",), 2),
    ({"containers": [{"resources": {"requests": {"nvidia.com/gpu": "2", "amd.com/gpu": "1"}}}]},
     ("nvidia.com/gpu", "amd.com/gpu"), 3),
    ({"containers": [{"resources": {"requests": {"amd.com/gpu": "1"}}}]}, ("nvidia.com/gpu",), 0),
    ({"containers": [{"name": "no-resources"}]}, ("nvidia.com/gpu",), 0),
])
def test_requested_gpus(pod_spec, resources, gpus) -> None:
    obj = workload(count=3)
    obj["spec"]["podSets"][0]["template"]["spec"] = pod_spec
    expo, _, h = collector(gpu_resources=resources)
    h["workloads"].replace([obj])
    assert series(text(expo))[sample("gangscope_workload_requested_gpus", namespace="team", workload="wl")] == 3 * gpus


def _break(path: str, value):
    obj = workload(conditions=admitted_conditions())
    target = obj
    parts = path.split(".")
    for p in parts[:-1]:
        target = target[int(p)] if p.isdigit() else target[p]
    last = parts[-1]
    if last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return obj


@pytest.mark.parametrize(("path", "value"), [
    ("spec", "not-a-dict"),
    ("spec.active", "yes"),
    ("spec.podSets", {"a": 1}),
    ("spec.podSets.0.count", "16"),
    ("spec.podSets.0.template.spec.containers.0.resources.requests.nvidia.com/gpu", "eight"),
    ("status.conditions", "Admitted"),
    ("status.conditions.0", 17),
    ("status.conditions.1.status", True),
    ("status.conditions.1.reason", ["x"]),
    ("status.conditions.0.lastTransitionTime", "yesterday"),
    ("status.admission.podSetAssignments.0.topologyAssignment.slices.0.domainCount", 7),
    ("status.admission.podSetAssignments.0.topologyAssignment", []),
    ("status.admission.clusterQueue", 5),
    ("status.schedulingStats", {"evictions": [{"reason": "Preempted", "count": "one"}]}),
    ("status.unhealthyNodes", [{"name": 5}, "x"]),
    ("metadata.labels", {"a": 1}),
    ("metadata.ownerReferences", {"kind": "Job"}),
    ("status.nominatedClusterNames", "worker-1"),
    ("status.clusterName", ["worker-1"]),
])
def test_malformed_fields_are_counted_and_the_rest_exported(path: str, value) -> None:
    if "nvidia.com/gpu" in path:  # the dotted resource name is one key
        obj = workload(gpus=value, conditions=admitted_conditions())
    else:
        obj = _break(path, value)
    expo, _, h = collector()
    h["workloads"].replace([obj])
    assert 'gangscope_workload_info{namespace="team",workload="wl"' in text(expo)
    assert parse_errors(expo, "workloads") >= 1


@pytest.mark.parametrize("bad", [None, 5, "text", [], {"metadata": {"name": 5, "namespace": "x"}},
                                 {"metadata": {"name": "x"}}, {"metadata": "nope"}])
def test_unusable_objects_are_skipped_and_counted(bad) -> None:
    expo, store, h = collector()
    h["workloads"].replace([bad, workload(name="good")])
    h["workloads"].apply("MODIFIED", bad)
    h["workloads"].apply("DELETED", bad)
    assert list(store.workloads) == [("team", "good")]
    assert parse_errors(expo, "workloads") == 3


def test_unknown_condition_types_and_statuses_are_exported_as_they_are() -> None:
    expo, _, h = collector()
    h["workloads"].replace([workload(conditions=[cond("QuotaReserved", "Maybe", "Thinking"), cond("BrandNew", "True", "Why\"Not")])])
    s = series(text(expo))
    assert s[sample("gangscope_workload_condition", namespace="team", workload="wl", type="BrandNew", status="True", reason='Why"Not')] == 1
    assert s[sample("gangscope_workload_condition", namespace="team", workload="wl", type="QuotaReserved", status="Maybe", reason="Thinking")] == 1
    assert parse_errors(expo, "workloads") == 0


def test_replace_deletes_missing_and_delete_event_removes_lines() -> None:
    expo, store, h = collector()
    changed: list = []
    store.on_workload_change.append(changed.append)
    h["workloads"].replace([workload("a"), workload("b")])
    h["workloads"].replace([workload("b")])
    assert list(store.workloads) == [("team", "b")]
    assert 'workload="a"' not in text(expo)
    h["workloads"].apply("DELETED", workload("b"))
    assert "gangscope_workload_info{" not in text(expo)
    assert ("team", "a") in changed and changed[-1] == ("team", "b") and store.workload("team", "b") is None


def test_store_lookups_for_the_gang_join() -> None:
    _, store, h = collector()
    obj = workload("w1", conditions=admitted_conditions())
    obj["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] = "label-uid"
    h["workloads"].replace([obj, workload("w2")])
    assert [w.name for w in store.workloads_by_owner_uid("job-uid-w1")] == ["w1"]
    assert [w.name for w in store.workloads_by_owner_uid("label-uid")] == ["w1"]
    assert [w.name for w in store.workloads_by_owner_name("team", "job-w2")] == ["w2"]
    w1 = store.workload("team", "w1")
    assert w1.podsets[0].labels == {"scheduling.x-k8s.io/pod-group": "w1"}
    assert w1.podsets[0].gpus_per_pod == 8 and w1.podsets[0].count == 2
    assert w1.conditions["Admitted"].last_transition == "2026-08-20T10:05:12Z"
    assert w1.assignments[0].flavors == {"nvidia.com/gpu": "tas"}
    assert [(dict(p)["host"], n) for p, n in w1.last_assignments[0].placed] == [("h1", 1), ("h2", 1)]
    h["workloads"].apply("DELETED", obj)
    assert store.workloads_by_owner_uid("label-uid") == []


def test_label_values_escaped() -> None:
    expo, _, h = collector()
    h["workloads"].replace([workload(conditions=[cond("X", "True", 'a"b\\c\nd ☃')], hosts=['odd"host'])])
    s = series(text(expo))
    assert s[sample("gangscope_workload_condition", namespace="team", workload="wl", type="X", status="True", reason='a"b\\c\nd ☃')] == 1
    assert s[sample("gangscope_workload_topology_pods", namespace="team", workload="wl", podset="main", host='odd"host')] == 1


def test_handler_never_raises_on_deep_garbage() -> None:
    expo, _, h = collector()
    garbage = copy.deepcopy(workload())
    garbage["status"] = {"admission": {"podSetAssignments": [None, 1, {"topologyAssignment": {"levels": [HOST], "slices": "x"}}]},
                         "conditions": [None], "requeueState": 3, "schedulingStats": [], "unhealthyNodes": {}}
    garbage["spec"]["podSets"] = [None, {"template": 5}, {"template": {"spec": {"containers": 5, "initContainers": [None]}}}]
    h["workloads"].replace([garbage])
    h["workloads"].apply("MODIFIED", garbage)
    assert 'gangscope_workload_info{namespace="team",workload="wl"' in text(expo)
    assert parse_errors(expo, "workloads") > 0


# ---- evictions per domain ----------------------------------------------------------------------

def _evict(h, obj, reason: str = "NodeFailures", count: int = 1) -> None:
    h["workloads"].apply("MODIFIED", modified(obj, conditions=[*admitted_conditions(), cond("Evicted", "True", reason)],
                                              schedulingStats={"evictions": [{"reason": reason, "underlyingCause": "", "count": count}]}))


def _domain_evictions(expo: Exposition) -> dict:
    return {tuple(sorted((k, v) for k, v in k[1] if k not in ("reason", "underlying_cause"))): v
            for k, v in series(text(expo)).items() if k[0] == "gangscope_topology_evictions_total"}


@pytest.mark.parametrize(("level", "expected"), [
    (None, {(("block", "b1"), ("rack", "r1")): 1, (("block", "b1"), ("rack", "r2")): 1}),  # the level above the host
    ("block", {(("block", "b1"),): 1}),
    (RACK, {(("block", "b1"), ("rack", "r1")): 1, (("block", "b1"), ("rack", "r2")): 1}),
    ("host", {(("block", "b1"), ("host", h), ("rack", r)): 1 for h, r in (("h1", "r1"), ("h2", "r1"), ("h3", "r2"))}),
])
def test_an_eviction_counts_once_per_domain_at_the_eviction_level(level: str | None, expected: dict) -> None:
    """A gang on three hosts in two racks: one NodeFailures eviction is one in each rack, not three."""
    expo, _, h = collector(eviction_level=level)
    h["topologies"].replace([topology()])
    h["nodes"].replace([node("h1", "b1", "r1"), node("h2", "b1", "r1"), node("h3", "b1", "r2")])
    obj = workload(hosts=["h1", "h2", "h3"], conditions=admitted_conditions())
    h["workloads"].replace([obj])
    _evict(h, obj)
    _evict(h, obj)  # the same count again: no new eviction
    assert _domain_evictions(expo) == expected
    _evict(h, obj, count=3)  # two more
    assert _domain_evictions(expo) == {k: 3 for k in expected}


def test_domains_without_nodes_are_pruned_after_the_grace_period() -> None:
    now = [1000.0]
    expo = Exposition()
    store, handlers, _ = build_collector(expo, eviction_grace=100.0)
    store.clock = lambda: now[0]
    handlers["topologies"].replace([topology()])
    handlers["nodes"].replace([node("h1", "b1", "r1"), node("h3", "b1", "r2")])
    obj = workload(hosts=["h1", "h3"], conditions=admitted_conditions())
    handlers["workloads"].replace([obj])
    _evict(handlers, obj)
    assert len(_domain_evictions(expo)) == 2
    handlers["nodes"].apply("DELETED", node("h3", "b1", "r2"))  # rack r2 loses its last Node at t=1000
    now[0] = 1099.0
    store.prune_domains()
    assert len(_domain_evictions(expo)) == 2, "kept within the grace period"
    handlers["nodes"].apply("ADDED", node("h4", "b1", "r1"))  # another rack's Node changes nothing for r2
    now[0] = 1100.0
    store.prune_domains()
    assert _domain_evictions(expo) == {(("block", "b1"), ("rack", "r1")): 1}
    # a Node back in the domain before the grace ends keeps its series
    _evict(handlers, obj, count=2)
    handlers["nodes"].apply("DELETED", node("h1", "b1", "r1"))
    handlers["nodes"].apply("DELETED", node("h4", "b1", "r1"))
    handlers["nodes"].apply("ADDED", node("h5", "b1", "r1"))
    now[0] = 5000.0
    store.prune_domains()
    assert _domain_evictions(expo)[(("block", "b1"), ("rack", "r1"))] == 2


async def test_pruning_and_backoff_end_run_on_timers() -> None:
    import asyncio
    import time
    from datetime import UTC, datetime

    expo, store, h = collector(eviction_grace=0.05)
    store.start_timers()
    try:
        h["topologies"].replace([topology()])
        h["nodes"].replace([node("h1", "b1", "r1")])
        obj = workload(hosts=["h1"], conditions=admitted_conditions())
        h["workloads"].replace([obj])
        _evict(h, obj)
        h["nodes"].apply("DELETED", node("h1", "b1", "r1"))
        at = datetime.fromtimestamp(time.time() + 0.3, UTC).isoformat()
        backoff = workload("backoff", admitted_cq=None, conditions=[cond("QuotaReserved", "False", "PendingEvaluation"),
                                                                     cond("Requeued", "False", "PodsReadyTimeout")])
        backoff["status"]["requeueState"] = {"count": 1, "requeueAt": at}
        h["workloads"].apply("ADDED", backoff)
        assert store.workload("team", "backoff").stage == "backoff"
        await asyncio.sleep(0.6)
        assert _domain_evictions(expo) == {}
        assert store.workload("team", "backoff").stage == "queued"
    finally:
        store.stop_timers()


# ---- each flavor's own Topology -------------------------------------------------------------------

CLIQUE = "nvidia.com/gpu.clique"


def _flavor(name: str, topology_name: str | None) -> dict:
    spec = {"topologyName": topology_name} if topology_name else {}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def _on(name: str, host: str, flavor: str) -> dict:
    obj = workload(name, hosts=[host], conditions=admitted_conditions())
    obj["status"]["admission"]["podSetAssignments"][0]["flavors"] = {"nvidia.com/gpu": flavor, "cpu": "default"}
    return obj


def test_each_assignment_is_expanded_with_its_flavors_topology() -> None:
    """H100 racks and GB200 NVLink domains: two TAS flavors, two Topologies. Each Workload's path
    fills only its own Topology's levels, although the GB200 node also carries a rack label; an
    assignment whose Topology cannot be resolved is reported, not guessed."""
    expo, store, h = collector()
    h["topologies"].replace([topology("h100", (BLOCK, RACK, HOST)), topology("gb200", (CLIQUE, HOST))])
    h["resourceflavors"].replace([_flavor("h100-tas", "h100"), _flavor("gb200-tas", "gb200"), _flavor("default", None),
                                  _flavor("plain", None), _flavor("typo", "gb-200")])
    h["nodes"].replace([node("h1", "b1", "r1"),
                        {**node("g1", "", "r5"), "metadata": {"name": "g1", "labels": {CLIQUE: "c1", RACK: "r5", HOST: "g1"}}}])
    h["workloads"].replace([_on("a", "h1", "h100-tas"), _on("b", "g1", "gb200-tas"), _on("c", "h1", "plain"),
                            _on("d", "g1", "typo"), _on("e", "g1", "unknown")])
    assert store.levels.aliases == ("gpu_clique", "block", "rack", "host")
    pods = {dict(k[1])["workload"]: {a: v for a, v in k[1] if a in ("gpu_clique", "block", "rack", "host")}
            for k in series(text(expo)) if k[0] == "gangscope_workload_topology_pods"}
    assert pods == {
        "a": {"gpu_clique": "", "block": "b1", "rack": "r1", "host": "h1"},
        "b": {"gpu_clique": "c1", "block": "", "rack": "", "host": "g1"},
        "c": {"gpu_clique": "", "block": "", "rack": "", "host": "h1"},
        "d": {"gpu_clique": "", "block": "", "rack": "", "host": "g1"},
        "e": {"gpu_clique": "", "block": "", "rack": "", "host": "g1"},
    }
    unresolved = {tuple(v for _, v in sorted(k[1])): n for k, n in series(text(expo)).items()
                  if k[0] == "gangscope_topology_unresolved_workloads"}
    # (flavor, problem, topology) in label-name order
    assert unresolved == {("default,plain", "no_topology_name", ""): 1, ("typo", "topology_missing", "gb-200"): 1,
                          ("unknown", "flavor_missing", ""): 1}
    # fixing the flavor expands the Workload at once, and the report clears
    h["resourceflavors"].apply("MODIFIED", _flavor("typo", "gb200"))
    d = [dict(k[1]) for k in series(text(expo)) if k[0] == "gangscope_workload_topology_pods" and dict(k[1])["workload"] == "d"]
    assert d[0]["gpu_clique"] == "c1"
    assert not [k for k in series(text(expo)) if k[0] == "gangscope_topology_unresolved_workloads" and ("flavor", "typo") in k[1]]


def test_one_topology_is_the_flavors_when_no_flavor_is_known() -> None:
    """Kueue places by topology only in a flavor that names an existing Topology, so with a single
    Topology and no ResourceFlavor listed (a dump without them) that Topology is the flavor's."""
    expo, _, h = collector()
    h["topologies"].replace([topology()])
    h["nodes"].replace([node("h1", "b1", "r1")])
    h["workloads"].replace([_on("a", "h1", "h100-tas")])
    s = series(text(expo))
    assert s[sample("gangscope_workload_topology_pods", namespace="team", workload="a", podset="main", block="b1", rack="r1",
                    host="h1")] == 1
    assert not [k for k in s if k[0] == "gangscope_topology_unresolved_workloads"]


def test_multikueue_worker_cluster_and_nominated_clusters_on_the_info_series() -> None:
    """MultiKueue writes status.nominatedClusterNames while it looks for a worker, then
    status.clusterName (and clears the nominations: the CRD makes them mutually exclusive;
    kueue pkg/controller/admissionchecks/multikueue/workload.go:880,917); both are on
    gangscope_workload_info, empty for a Workload of a single cluster."""
    expo, _, h = collector()
    nominated = workload(name="nominated")
    nominated["status"]["nominatedClusterNames"] = ["worker-eu", "worker-us"]
    dispatched = workload(name="dispatched", conditions=admitted_conditions())
    dispatched["status"]["clusterName"] = "worker-eu"
    h["workloads"].replace([nominated, dispatched, workload(name="local")])
    info = {dict(k[1])["workload"]: dict(k[1]) for k in workload_series(expo) if k[0] == "gangscope_workload_info"}
    assert (info["nominated"]["worker_cluster"], info["nominated"]["nominated_worker_clusters"]) == ("", "worker-eu,worker-us")
    assert (info["dispatched"]["worker_cluster"], info["dispatched"]["nominated_worker_clusters"]) == ("worker-eu", "")
    assert (info["local"]["worker_cluster"], info["local"]["nominated_worker_clusters"]) == ("", "")
    assert parse_errors(expo, "workloads") == 0


def test_denied_families_are_never_formatted(monkeypatch: pytest.MonkeyPatch) -> None:
    """--metric-denylist: a Workload's per-host and placement-quality lines are not built at all
    (not built and then dropped), nor a domain's placeable pods; the other families are unchanged."""
    import exporter.cluster.workloads as workloads

    def refuse(*args, **kwargs):
        raise AssertionError("a denied family was formatted")

    monkeypatch.setattr(workloads, "_pod_tails", refuse)
    monkeypatch.setattr(workloads, "_quality_tails", refuse)
    denied = {"gangscope_workload_topology_pods", "gangscope_workload_domains_spanned",
              "gangscope_workload_locality_ratio", "gangscope_domain_placeable_pods"}
    expo = Exposition(exported=lambda name: name not in denied)
    store, handlers, _ = build_collector(expo)
    for name, h in handlers.items():
        h.health = SourceHealth(name, expo)
    from exporter.cluster.capacity import DOMAIN_PLACEABLE

    assert store.capacity._skip == {DOMAIN_PLACEABLE}  # the domain renderer does not build its lines
    handlers["topologies"].replace([topology()])
    handlers["nodes"].replace([node("h1", "b1", "r1"), node("h2", "b1", "r2")])
    handlers["workloads"].replace([workload(conditions=admitted_conditions())])
    names = {k[0] for k in series(text(expo))}
    assert not names & denied
    assert {"gangscope_workload_stage", "gangscope_workload_info", "gangscope_workload_condition"} <= names



def test_a_pod_template_keeps_only_the_labels_and_annotations_that_name_its_gang() -> None:
    """Template metadata beyond the gang's name is the job's own (unique per job): not kept. Every
    key the gang join reads (gang_state.template_refs) is among those kept."""
    from exporter.cluster.gang_state import TEMPLATE_ANNOTATIONS, TEMPLATE_LABELS, template_refs
    from exporter.cluster.workloads import TEMPLATE_ANNOTATION_KEYS, TEMPLATE_LABEL_KEYS

    assert {k for k, _ in TEMPLATE_LABELS} <= set(TEMPLATE_LABEL_KEYS)
    assert {k for k, _ in TEMPLATE_ANNOTATIONS} <= set(TEMPLATE_ANNOTATION_KEYS)
    obj = workload("wl-a")
    meta = obj["spec"]["podSets"][0]["template"]["metadata"]
    meta["labels"].update({"job-name": "wl-a-job", "batch.kubernetes.io/controller-uid": "u-1"})
    meta["annotations"] = {"pod-group-name": "kai-pg", "team.example.com/owner": "alice"}
    wl = parse_workload(obj)
    (ps,) = wl.podsets
    assert ps.labels == {"scheduling.x-k8s.io/pod-group": "wl-a"}
    assert ps.annotations == {"pod-group-name": "kai-pg"}
    assert template_refs(wl) == [("coscheduling", "wl-a", 8.0), ("kai", "kai-pg", 8.0)]
