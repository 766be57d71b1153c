"""The pod store: pods from overlapping selective watches kept once, GPUs bound per node (the query
API issue 16 builds on), malformed pods counted; and the live collector watching only the pods of
gangs, Kueue and job controllers through the simulated API server's selectors."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.cluster.pods import PodChanges, PodStore, parse_pod
from exporter.exposition import Exposition
from exporter.fields import ParseError
from exporter.health import SourceHealth
from exporter.kube.resources import COSCHEDULING_PODGROUPS, POD_RESOURCES, WORKLOADS
from exporter.sim.apiserver import SimApiServer
from collectors import started_collector
from test_gang_evidence import pod
from waiting import eventually


def test_trimmed_record_of_a_pod() -> None:
    obj = pod("w-0", labels={"kueue.x-k8s.io/podset": "main", "scheduling.x-k8s.io/pod-group": "g",
                             "jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/jobset-uid": "js-uid"},
              annotations={"kueue.x-k8s.io/workload": "wl-1"}, gpus=4)
    obj["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "js-w-0", "uid": "job-uid", "controller": True}]
    obj["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]
    p = parse_pod(obj, ("nvidia.com/gpu",))
    assert (p.namespace, p.name, p.uid, p.node, p.phase, p.ready, p.gpus) == ("ml", "w-0", "uid-ml-w-0", "n1", "Running", True, 8)
    assert (p.gang, p.workload, p.owner, p.job, p.jobset_uid) == (
        ("coscheduling", "g", ""), "wl-1", ("Job", "js-w-0", "job-uid"), ("JobSet", "js", "", 0), "js-uid")
    # shared pieces are one object for every pod that names them
    assert parse_pod(obj, ("nvidia.com/gpu",)).gang is p.gang


@pytest.mark.parametrize(("change", "gang"), [
    ({"spec": {"schedulingGroup": {"podGroupName": "native-g"}}}, ("native", "native-g", "")),
    ({"annotations": {"pod-group-name": "kai-g"}, "labels": {"kai.scheduler/subgroup-name": "rack"}}, ("kai", "kai-g", "rack")),
    ({"annotations": {"scheduling.k8s.io/group-name": "vc-g"}}, ("volcano", "vc-g", "")),
    ({"labels": {"pod-group.scheduling.sigs.k8s.io": "old"}}, ("coscheduling_legacy", "old", "")),
    ({"spec": {"workloadRef": {"name": "wl", "podGroup": "workers", "podGroupReplicaKey": "1"}}}, ("native", "wl/workers", "1")),
    ({"labels": {"pod-group.scheduling.run.ai/name": "x"}}, None),  # KAI ignores labels (kai-05)
])
def test_how_each_api_names_the_gang(change: dict[str, Any], gang: tuple | None) -> None:
    obj = pod("p", labels=change.get("labels"), annotations=change.get("annotations"), spec=change.get("spec"))
    assert parse_pod(obj, ("nvidia.com/gpu",)).gang == gang


@pytest.mark.parametrize("bad", [
    {"metadata": {"name": "p", "labels": "x"}}, {"metadata": {"name": ""}}, {"metadata": {"name": "p"}, "spec": []},
    {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "lots"}}}]}},
    {"metadata": {"name": "p", "annotations": {"pod-group-name": 3}}}, 7,
    {"metadata": {"name": "p", "deletionTimestamp": 5}}, {"metadata": {"name": "p"}, "spec": {"schedulingGates": "x"}},
    {"metadata": {"name": "p"}, "spec": {"schedulingGates": [{"name": 1}]}},
    {"metadata": {"name": "p", "annotations": {"gpu-fraction": "half"}}},
])
def test_malformed_pods_raise_parse_error(bad: Any) -> None:
    with pytest.raises(ParseError):
        parse_pod(bad, ("nvidia.com/gpu",))


def store_with_changes() -> tuple[PodStore, list[PodChanges]]:
    store = PodStore()
    seen: list[PodChanges] = []
    store.on_change.append(seen.append)
    return store, seen


def test_a_pod_in_several_watches_is_kept_once_until_the_last_drops_it() -> None:
    store, _ = store_with_changes()
    h = store.handlers()
    both = pod("a", labels={"kueue.x-k8s.io/podset": "m", "scheduling.x-k8s.io/pod-group": "g"})
    h["pods_kueue"].replace([both])
    h["pods_coscheduling"].replace([both])
    assert list(store.pods) == ["uid-ml-a"] and store.gpus_bound_on("n1") == 8
    h["pods_kueue"].apply("DELETED", both)  # Kueue removed its label: still the gang's pod
    assert "uid-ml-a" in store.pods
    h["pods_coscheduling"].replace([])  # a relist without it: gone
    assert store.pods == {} and store.gpus_bound_on("n1") == 0


def test_a_late_event_of_a_lagging_watch_does_not_undo_a_newer_state() -> None:
    store, _ = store_with_changes()
    h = store.handlers()
    labels = {"kueue.x-k8s.io/podset": "m", "scheduling.x-k8s.io/pod-group": "g"}
    h["pods_kueue"].apply("ADDED", pod("a", labels=labels, phase="Running", rv="20"))
    h["pods_coscheduling"].apply("MODIFIED", pod("a", labels=labels, phase="Pending", node=None, rv="10"))
    assert store.pods["uid-ml-a"].phase == "Running"
    h["pods_coscheduling"].apply("MODIFIED", pod("a", labels=labels, phase="Succeeded", rv="30"))
    assert store.pods["uid-ml-a"].phase == "Succeeded" and store.gpus_bound_by_node() == {}


def test_gpus_bound_per_node_and_the_change_callback() -> None:
    """The query API of issue 16: GPUs of bound, non-terminal watched pods per node name, and the
    nodes whose figure changed in each announced change."""
    store, seen = store_with_changes()
    h = store.handlers()["pods_kueue"]
    labels = {"kueue.x-k8s.io/podset": "m"}
    h.replace([pod("a", labels=labels, node="n1", gpus=4), pod("b", labels=labels, node="n1", gpus=2),
               pod("c", labels=labels, node="n2", gpus=8, phase="Pending", ready=False),  # bound, starting: holds
               pod("d", labels=labels, node="n3", gpus=8, phase="Failed"),  # finished: holds nothing
               pod("e", labels=labels, node=None, gpus=8, phase="Pending")])  # not bound
    assert dict(store.gpus_bound_by_node()) == {"n1": 6, "n2": 8}
    assert store.gpus_bound_on("n3") == 0
    assert len(seen) == 1 and seen[0].nodes == {"n1", "n2"} and seen[0].covered == {"pods_kueue"}  # one LIST, one change
    with pytest.raises(TypeError):
        store.gpus_bound_by_node()["n9"] = 1  # type: ignore[index]  # read-only
    h.apply("MODIFIED", pod("b", labels=labels, node="n1", gpus=2, phase="Succeeded", rv="2"))
    assert store.gpus_bound_on("n1") == 4 and seen[-1].nodes == {"n1"}
    h.apply("DELETED", pod("a", labels=labels))
    assert "n1" not in store.gpus_bound_by_node() and seen[-1].nodes == {"n1"}


def test_non_tas_usage_per_node_as_pods_come_go_and_change() -> None:
    """Kueue's non-TAS usage (tas_non_tas_pod_cache.go:112-135): every request of the bound,
    non-terminal pods and one ``pods`` unit each, through a node's first pod, a second, a status
    change, a move and the last pod leaving."""
    store = PodStore()
    h = store.handlers()["pods_kueue"]
    labels = {"kueue.x-k8s.io/podset": "m"}
    h.replace([pod("a", labels=labels, node="n1", gpus=4), pod("b", labels=labels, node="n2", gpus=4),
               pod("t", labels=labels, node="n1", gpus=8, annotations={"kueue.x-k8s.io/podset-required-topology": "rack"})])
    assert dict(store.non_tas_usage_on("n1")) == dict(store.non_tas_usage_on("n2")) == {"nvidia.com/gpu": 4, "pods": 1}
    h.apply("ADDED", pod("c", labels=labels, node="n1", gpus=2))
    assert dict(store.non_tas_usage_on("n1")) == {"nvidia.com/gpu": 6, "pods": 2}
    assert dict(store.non_tas_usage_on("n2")) == {"nvidia.com/gpu": 4, "pods": 1}  # its neighbour's is its own
    h.apply("MODIFIED", pod("c", labels=labels, node="n1", gpus=2, ready=False, rv="2"))  # not ready: still bound
    h.apply("DELETED", pod("a", labels=labels))
    assert dict(store.non_tas_usage_on("n1")) == {"nvidia.com/gpu": 2, "pods": 1}
    h.apply("MODIFIED", pod("b", labels=labels, node="n2", gpus=4, phase="Succeeded", rv="2"))
    h.apply("MODIFIED", pod("c", labels=labels, node="n3", gpus=2, rv="3"))
    assert (dict(store.non_tas_usage_on("n1")), dict(store.non_tas_usage_on("n2"))) == ({}, {})
    assert dict(store.non_tas_usage_on("n3")) == {"nvidia.com/gpu": 2, "pods": 1}


def test_malformed_pods_are_counted_and_the_rest_kept() -> None:
    expo = Exposition()
    store = PodStore()
    h = store.handlers()["pods_kai"]
    h.health = SourceHealth("pods_kai", expo)
    h.replace([pod("ok"), {"metadata": {"name": "bad", "labels": "x"}}, "junk"])
    assert list(store.pods) == ["uid-ml-ok"] and h.health.parse_errors == 2


def test_unknown_pod_phase_is_counted_and_the_pod_kept() -> None:
    """Its node and GPUs are real; its gang judges it unknown (tests/test_gang_state.py)."""
    expo = Exposition()
    store = PodStore()
    h = store.handlers()["pods_kai"]
    h.health = SourceHealth("pods_kai", expo)
    odd = pod("odd")
    odd["status"]["phase"] = "Exploded"
    h.replace([pod("ok"), odd])
    assert sorted(store.pods) == ["uid-ml-odd", "uid-ml-ok"] and h.health.parse_errors == 1
    assert store.pods["uid-ml-odd"].phase == "Exploded"


async def test_collector_watches_only_the_pods_of_gangs_kueue_and_jobs(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    """Through real HTTP: each pod source asks the API server for its selector; a pod no selector
    matches (a web server, a pod of another scheduler) is never sent, let alone kept."""
    kube_sim.serve(POD_RESOURCES[0])
    for r in (WORKLOADS, COSCHEDULING_PODGROUPS):
        kube_sim.serve(r)
    wanted = {
        "kueue": pod("kueue", labels={"kueue.x-k8s.io/podset": "main"}),
        "cosched": pod("cosched", labels={"scheduling.x-k8s.io/pod-group": "g"}),
        "kai": pod("kai", annotations={"pod-group-name": "k"}, spec={"schedulerName": "kai-scheduler"}),
        "volcano": pod("volcano", annotations={"scheduling.k8s.io/group-name": "v"}, spec={"schedulerName": "volcano"}),
        "jobset": pod("jobset", labels={"jobset.sigs.k8s.io/jobset-name": "js"}),
        "lws": pod("lws", labels={"leaderworkerset.sigs.k8s.io/name": "l", "leaderworkerset.sigs.k8s.io/group-index": "0"}),
    }
    for o in wanted.values():
        kube_sim.create(o)
    kube_sim.create(pod("nginx", labels={"app": "web"}))
    kube_sim.create(pod("other-kai", annotations={"pod-group-name": "k"}, spec={"schedulerName": "my-kai"}))
    collector = await started_collector(kube_sim_kubeconfig)
    try:
        store = collector.gangs.pods
        assert store is not None
        await eventually(lambda: {p.name for p in store.pods.values()} == set(wanted))
        # a pod that leaves every selector goes; one that enters one arrives
        kube_sim.update(pod("kueue", rv="5"))
        kube_sim.update(pod("nginx", labels={"app": "web", "kueue.x-k8s.io/podset": "main"}))
        await eventually(lambda: {p.name for p in store.pods.values()} == set(wanted) - {"kueue"} | {"nginx"})
        health = {s.health.name: s.health.objects for s in collector.sources.sources.values() if s.health.name.startswith("pods_")}
        assert health["pods_kai"] == 1 and health["pods_volcano"] == 1
    finally:
        await collector.stop()


async def test_collector_without_pods_flag_watches_none(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    kube_sim.serve(POD_RESOURCES[0])
    kube_sim.create(pod("kueue", labels={"kueue.x-k8s.io/podset": "main"}))
    collector = await started_collector(kube_sim_kubeconfig, "--no-pods")
    try:
        assert collector.gangs.pods is None
        assert not [n for n in collector.sources.sources if n.startswith("pods")]
    finally:
        await collector.stop()


async def test_scheduler_name_flags_choose_the_pods(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    kube_sim.serve(POD_RESOURCES[0])
    kube_sim.create(pod("mine", annotations={"pod-group-name": "k"}, spec={"schedulerName": "my-kai"}))
    kube_sim.create(pod("default", annotations={"pod-group-name": "k"}, spec={"schedulerName": "kai-scheduler"}))
    collector = await started_collector(kube_sim_kubeconfig, "--kai-scheduler-name", "my-kai")
    try:
        await eventually(lambda: {p.name for p in collector.gangs.pods.pods.values()} == {"mine"})
    finally:
        await collector.stop()


async def test_live_gangs_follow_their_pods_and_missing_apis_are_sources_down(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    """The whole chain over HTTP: discovery finds the KAI and native (v1beta1) PodGroup APIs, the
    pods' watches deliver a KAI gang's and a native gang's members, the gangs follow them; the
    APIs this cluster does not serve (Volcano, JobSet, TrainJob, LeaderWorkerSet, the composite
    and v1alpha1 native kinds) are sources down, not errors."""
    from exporter.kube.resources import KAI_PODGROUPS, NATIVE_PODGROUPS
    from test_gang_evidence import kai01, native_pg, native_pods

    kube_sim.serve(POD_RESOURCES[0])
    kube_sim.serve(KAI_PODGROUPS)
    kube_sim.serve(NATIVE_PODGROUPS, versions=["v1beta1"])
    kube_sim.create(kai01())
    kube_sim.create(native_pg("workers-0", 2))
    ns = "gang-scheduling-test"
    kai_pods = [pod(f"gang-worker-{i}", ns, annotations={"pod-group-name": "gang-test-group"}, gpus=1,
                    spec={"schedulerName": "kai-scheduler"}, node=f"n{i}") for i in range(2)]
    for p in [*kai_pods, *native_pods("workers-0", 2)]:
        kube_sim.create(p)
    collector = await started_collector(kube_sim_kubeconfig)
    try:
        def stage(name: str) -> str | None:
            found = [g.stage for k, g in collector.gangs.gangs.items() if k[2] == name]
            return found[0] if found else None

        await eventually(lambda: stage("gang-test-group") == "assembled" and stage("workers-0") == "assembled")
        kube_sim.delete(kai_pods[1])
        await eventually(lambda: stage("gang-test-group") == "partially_bound")
        states = {name: (s.state, s.health.errors) for name, s in collector.sources.sources.items()}
        for name in ("podgroups_volcano", "jobsets", "trainjobs", "leaderworkersets", "compositepodgroups_native",
                     "workloads_native"):
            assert states[name] == ("not_served", 0), (name, states[name])
        assert states["podgroups_kai"][0] == states["podgroups_native"][0] == "synced"
        assert collector.sources.sources["podgroups_native"].version == "v1beta1"
        assert collector.sources.ready()[0]
    finally:
        await collector.stop()
