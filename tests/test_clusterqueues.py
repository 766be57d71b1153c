"""ClusterQueues and Cohorts (exporter.cluster.clusterqueues): records, lines, and what an inactive queue means.

Objects are real ones (../shared/fixtures/real/) or built as Kueue's ClusterQueue controller writes
them (kueue_objects.cluster_queue, quoting kubernetes-sigs/kueue@ff69552e).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from exporter.cluster.clusterqueues import parse_cluster_queue, parse_cohort, render_cluster_queue
from exporter.cluster.store import ClusterStore
from exporter.cluster.workload_state import in_queue, quota_reason_meaning, workload_state
from exporter.cluster.workloads import parse_workload
from exporter.exposition import Exposition
from exporter.fields import ParseError
from exporter.health import SourceHealth
import shared_folder
from kueue_objects import STOPPED, cluster_queue, cond, family_series, flavor, flavor_not_found, local_queue, workload

NOW = 1787220000.0


def real(name: str) -> dict[str, Any]:
    """A ClusterQueue of ../shared's real fixtures (the test skips without them, fails under CI)."""
    path = shared_folder.require("fixtures", "real", "kueue-and-gangs", name)
    return next(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") == "ClusterQueue")


def lines(cq: dict[str, Any], topologies: dict[str, str] | None = None) -> str:
    rec = parse_cluster_queue(cq)
    return "".join(line for ls in render_cluster_queue(rec, lambda f: (topologies or {}).get(f, "")).values() for line in ls)


# ---- records and lines ---------------------------------------------------------------------


def test_real_v1beta1_cluster_queue_lines() -> None:
    """kueue issue 707's ClusterQueue (v1beta1, cpu and memory, one flavor, usage without
    reservation, as Kueue 0.3 wrote it): its exact lines."""
    cq = parse_cluster_queue(real("kueue-707-clusterqueue-v1beta1.yaml"))
    assert (cq.name, cq.cohort, cq.flavor_names, cq.active, cq.active_reason, cq.stop_policy, cq.problems) == \
        ("cluster-queue", "", ("default-flavor",), True, "Ready", "None", ())
    assert cq.quota("default-flavor", "memory").nominal == 36 * 2**30
    assert cq.pending_workloads == 1 and cq.admitted_workloads == 1
    assert lines(real("kueue-707-clusterqueue-v1beta1.yaml")) == (
        'gangscope_cluster_queue_active{cluster_queue="cluster-queue",reason="Ready"} 1\n'
        'gangscope_cluster_queue_flavor_info{cluster_queue="cluster-queue",flavor="default-flavor",order="0",topology=""} 1\n'
        'gangscope_cluster_queue_nominal_quota{cluster_queue="cluster-queue",flavor="default-flavor",resource="cpu",topology=""} 9\n'
        'gangscope_cluster_queue_nominal_quota{cluster_queue="cluster-queue",flavor="default-flavor",resource="memory",'
        'topology=""} 38654705664\n'
        'gangscope_cluster_queue_used{cluster_queue="cluster-queue",flavor="default-flavor",resource="cpu",topology=""} 9\n'
        'gangscope_cluster_queue_used{cluster_queue="cluster-queue",flavor="default-flavor",resource="memory",'
        'topology=""} 629145600\n'
    )


def test_real_v1beta2_tas_cluster_queue() -> None:
    """Kueue's TAS documentation's ClusterQueue (v1beta2, no status yet): no Active condition,
    so not active with an empty reason; the flavor's Topology from its ResourceFlavor."""
    obj = real("kueue-frag-docs-tas-kind-v1beta2.yaml")
    cq = parse_cluster_queue(obj)
    assert (cq.flavor_names, cq.active, cq.has_active_condition, cq.inactive_reason) == (("tas-flavor",), False, False, "")
    text = lines(obj, {"tas-flavor": "default"})
    assert 'gangscope_cluster_queue_active{cluster_queue="tas-cluster-queue",reason=""} 0\n' in text
    assert 'gangscope_cluster_queue_flavor_info{cluster_queue="tas-cluster-queue",flavor="tas-flavor",order="0",' \
           'topology="default"} 1\n' in text


def test_flavor_order_over_resource_groups_and_limits() -> None:
    """flavor_names: every group's flavors in spec order (the order Kueue tries them);
    borrowing and lending limits kept (nil: unlimited), v1beta1's ``spec.cohort``."""
    obj = cluster_queue("cq", ("a100", "h100"), cohort="org", version="v1beta1")
    obj["spec"]["resourceGroups"].append({"coveredResources": ["cpu", "memory"], "flavors": [
        {"name": "cpu-pool", "resources": [{"name": "cpu", "nominalQuota": "100", "borrowingLimit": "10"},
                                           {"name": "memory", "nominalQuota": "1Ti", "lendingLimit": "512Gi"}]}]})
    obj["spec"]["stopPolicy"] = "Hold"
    obj["spec"]["fairSharing"] = {"weight": "2"}
    cq = parse_cluster_queue(obj)
    assert cq.flavor_names == ("a100", "h100", "cpu-pool")
    assert (cq.cohort, cq.stop_policy, cq.fair_sharing_weight) == ("org", "Hold", 2)
    assert cq.quota("cpu-pool", "cpu").borrowing_limit == 10 and cq.quota("cpu-pool", "cpu").lending_limit is None
    assert cq.quota("cpu-pool", "memory").lending_limit == 512 * 2**30
    assert cq.quota("a100", "cpu") is None


def test_cohort_record() -> None:
    c = parse_cohort({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "team-a"},
                      "spec": {"parentName": "org", "fairSharing": {"weight": "500m"}}})
    assert (c.name, c.parent, c.resource_groups, c.fair_sharing_weight, c.problems) == ("team-a", "org", (), 0.5, ())


@pytest.mark.parametrize("obj, error", [
    ({"kind": "ClusterQueue", "metadata": {}}, "without metadata.name"),
    ({"kind": "ClusterQueue", "metadata": {"name": "x"}, "spec": "gpu"}, "spec is a str"),
    ({"kind": "ClusterQueue", "metadata": {"name": "x"}, "spec": {"resourceGroups": {"flavors": []}}},
     "spec.resourceGroups is a dict"),
    # clusterqueue_types.go:254 (CEL) and :271-272: every flavor lists the covered resources, in order
    ({"kind": "ClusterQueue", "metadata": {"name": "x"}, "spec": {"resourceGroups": [
        {"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [{"name": "f", "resources": [
            {"name": "nvidia.com/gpu", "nominalQuota": 8}, {"name": "cpu", "nominalQuota": 8}]}]}]}},
     r"lists resources \['nvidia.com/gpu', 'cpu'\], not the group's coveredResources \['cpu', 'nvidia.com/gpu'\]"),
    ({"kind": "ClusterQueue", "metadata": {"name": "x"}, "spec": {"resourceGroups": [
        {"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [{"name": "f", "resources": [
            {"name": "cpu", "nominalQuota": 8}]}]}]}}, "lists resources"),
])
def test_unusable_cluster_queue_is_refused(obj: dict[str, Any], error: str) -> None:
    with pytest.raises(ParseError, match=error):
        parse_cluster_queue(obj)


def test_bad_fields_are_problems_and_the_rest_is_kept() -> None:
    obj = cluster_queue("cq")
    obj["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "lots"
    obj["status"]["flavorsUsage"] = [{"name": "tas", "resources": [{"name": "nvidia.com/gpu", "total": [8]}]}]
    obj["spec"]["stopPolicy"] = "Pause"
    cq = parse_cluster_queue(obj)
    assert len(cq.problems) == 3 and cq.flavor_names == ("tas",) and cq.active
    assert cq.quota("tas", "nvidia.com/gpu").nominal == 0


# ---- the store -----------------------------------------------------------------------------


def store_with(*objs: dict[str, Any]) -> tuple[ClusterStore, Exposition, dict[str, Any]]:
    ex = Exposition()
    store = ClusterStore(ex, clock=lambda: NOW)
    h = store.handlers()
    for name in h:
        h[name].health = SourceHealth(name, ex)
    for o in objs:
        h[o["kind"].lower() + "s" if o["kind"] != "ClusterQueue" else "clusterqueues"].apply("ADDED", o)
    return store, ex, h


def test_store_keeps_records_and_labels_the_flavor_topology() -> None:
    store, ex, h = store_with(cluster_queue("gpu-cq", ("tas",), reserved=16, used=8))
    assert store.cluster_queues["gpu-cq"].flavor_names == ("tas",)
    key = (("cluster_queue", "gpu-cq"), ("flavor", "tas"), ("resource", "nvidia.com/gpu"), ("topology", ""))
    assert family_series(ex, "gangscope_cluster_queue_reserved") == {key: 16}
    h["resourceflavors"].apply("ADDED", flavor("tas", "gpu-topology"))  # the flavor's Topology arrives later
    key = key[:3] + (("topology", "gpu-topology"),)
    assert family_series(ex, "gangscope_cluster_queue_reserved") == {key: 16}
    assert family_series(ex, "gangscope_cluster_queue_used") == {key: 8}
    assert family_series(ex, "gangscope_cluster_queue_nominal_quota") == {key: 64}
    h["clusterqueues"].apply("DELETED", cluster_queue("gpu-cq"))
    assert store.cluster_queues == {} and family_series(ex, "gangscope_cluster_queue_active") == {}


def test_only_shard_0_exports_the_cluster_queues() -> None:
    """Every shard reads every ClusterQueue (cluster-scoped): one exports them, or sums over
    shards would count each queue's quota once per shard."""
    store, ex, h = store_with(cluster_queue("gpu-cq"))
    assert family_series(ex, "gangscope_cluster_queue_active")
    store.set_cluster_queue_owner(False)
    assert family_series(ex, "gangscope_cluster_queue_active") == {}
    h["clusterqueues"].apply("MODIFIED", cluster_queue("gpu-cq", reserved=8))
    assert family_series(ex, "gangscope_cluster_queue_reserved") == {}
    assert store.cluster_queues["gpu-cq"].reservation  # kept for the judgements all the same
    store.set_cluster_queue_owner(True)
    assert len(family_series(ex, "gangscope_cluster_queue_reserved")) == 1


def test_malformed_cluster_queue_is_skipped_and_counted() -> None:
    store, ex, h = store_with(cluster_queue("good"))
    h["clusterqueues"].apply("ADDED", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
                                       "metadata": {"name": "bad"}, "spec": "gpu"})
    assert set(store.cluster_queues) == {"good"}
    assert family_series(ex, "gangscope_parse_errors_total")[(("source", "clusterqueues"),)] == 1


# ---- what "ClusterQueue X is inactive" means ----------------------------------------------------

INACTIVE = "ClusterQueue cq is inactive"


@pytest.mark.parametrize("reason", ["Suspended", "Pending", "Inadmissible"])
@pytest.mark.parametrize("queue, meaning", [
    # pkg/cache/scheduler/clusterqueue.go:316-318: a stopped queue's first reason is Stopped
    (cluster_queue("cq", stop_policy="Hold", active=STOPPED), ("held", "policy")),
    (cluster_queue("cq", stop_policy="HoldAndDrain", active=STOPPED), ("held", "policy")),
    # :320-322: a flavor deleted under the queue
    (cluster_queue("cq", active=flavor_not_found("tas")), ("inadmissible", "configuration")),
    # :352-356: a TAS flavor's Topology missing
    (cluster_queue("cq", active=("False", "TopologyNotFound", "Can't admit new workloads: there is no Topology "
                                 '"default" for TAS flavor "tas".')), ("inadmissible", "configuration")),
    (cluster_queue("cq", active=("False", "AdmissionCheckNotFound", "Can't admit new workloads: references missing "
                                 "AdmissionCheck(s): prov.")), ("inadmissible", "configuration")),
    # not known (ClusterQueues not watched): whether it is stopped is unknown, no page
    (None, ("held", "policy")),
    # another queue than the message names: unknown as well
    (cluster_queue("other", active=flavor_not_found("tas")), ("held", "policy")),
])
def test_inactive_cluster_queue(reason: str, queue: dict[str, Any] | None, meaning: tuple[str, str]) -> None:
    """scheduler.go:680 (legacy Pending), workload_controller.go:2035-2036 (typed Suspended; the
    controller's Inadmissible before the gate) all write "ClusterQueue X is inactive"."""
    cq = parse_cluster_queue(queue) if queue is not None else None
    assert quota_reason_meaning(reason, INACTIVE, None, cq) == meaning


def test_stopped_before_kueue_wrote_the_condition() -> None:
    obj = cluster_queue("cq", stop_policy="Hold")
    del obj["status"]
    assert parse_cluster_queue(obj).stopped
    assert quota_reason_meaning("Suspended", INACTIVE, None, parse_cluster_queue(obj)) == ("held", "policy")


def test_a_local_queue_that_is_inactive_stays_held() -> None:
    # workload_controller.go:2031-2032: "LocalQueue X is inactive" (a stopped LocalQueue)
    cq = parse_cluster_queue(cluster_queue("cq", active=flavor_not_found("tas")))
    assert quota_reason_meaning("Suspended", "LocalQueue lq is inactive", None, cq) == ("held", "policy")


def test_store_rejudges_the_waiting_workloads_when_the_queue_changes() -> None:
    wl = workload("wl", admitted_cq=None, conditions=[cond("QuotaReserved", "False", "Suspended", message=INACTIVE)])
    store, ex, h = store_with(local_queue("lq", "team", "cq"), cluster_queue("cq", stop_policy="Hold", active=STOPPED))
    wl["spec"]["queueName"] = "lq"
    h["workloads"].apply("ADDED", wl)
    assert store.workload("team", "wl").state.pending.category == "policy"
    h["clusterqueues"].apply("MODIFIED", cluster_queue("cq", active=flavor_not_found("tas")))
    state = store.workload("team", "wl").state
    assert (state.stage, state.pending.category) == ("inadmissible", "configuration")
    reasons = family_series(ex, "gangscope_workload_pending_reason")
    assert reasons == {(("category", "configuration"), ("namespace", "team"), ("reason", "Suspended"),
                        ("workload", "wl")): 1}


# ---- WaitingForReplacementPods -----------------------------------------------------------------


def test_waiting_for_replacement_pods_is_held_and_not_in_the_queue() -> None:
    """pod_controller.go:1490-1505 copies the Evicted condition's reason and message into
    WaitingForReplacementPods=True; workload.go:1283-1285 keeps such a Workload out of the queue."""
    evicted = cond("Evicted", "True", "PodsReadyTimeout", message="Exceeded the PodsReady timeout default/wl")
    obj = workload(admitted_cq=None, conditions=[
        cond("QuotaReserved", "False", "Pending", message="Exceeded the PodsReady timeout default/wl"), evicted,
        cond("WaitingForReplacementPods", "True", "PodsReadyTimeout", message="Exceeded the PodsReady timeout default/wl")])
    state = workload_state(parse_workload(obj), NOW)
    assert (state.stage, state.pending.reason, state.pending.category) == ("held", "WaitingForReplacementPods", "policy")
    assert not in_queue(state)
    obj2 = copy.deepcopy(obj)
    obj2["status"]["conditions"][-1].update(status="False", reason="PodsReady", message="No pods need replacement")
    state = workload_state(parse_workload(obj2), NOW)
    assert state.stage == "queued" and in_queue(state)


def test_waiting_for_replacement_pods_has_no_fit_and_no_queue_position() -> None:
    """The fit (gangscope_workload_fit) and the visibility poll cover only Workloads in Kueue's
    queue: a pod group waiting for replacement pods is not one (workload.go:1283-1285)."""
    from exporter.cluster.collector import build_collector
    from exporter.cluster.queue_positions import QueuePositionPoller
    from kueue_objects import cluster_queue, gpu_node, topology

    ex = Exposition()
    store, h, _ = build_collector(ex)
    h["clusterqueues"].replace([cluster_queue("cq")])
    h["topologies"].replace([topology()])
    h["resourceflavors"].replace([flavor("tas")])
    h["localqueues"].replace([local_queue("q", "team", "cq")])
    h["nodes"].replace([gpu_node("h1", "b1", "r1"), gpu_node("h2", "b1", "r1")])
    request = {"required": "cloud.provider.com/topology-rack"}
    gpu = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]  # the nodes' taint
    waits = workload("waits", hosts=[], count=2, admitted_cq=None, topology=request, tolerations=gpu,
                     conditions=[cond("QuotaReserved", "False", "Pending", message="waiting")])
    replacing = workload("replacing", hosts=[], count=2, admitted_cq=None, topology=request, tolerations=gpu, conditions=[
        cond("QuotaReserved", "False", "Pending", message="waiting"),
        cond("WaitingForReplacementPods", "True", "PodsFailed", message="Some Failed pods need replacement")])
    h["workloads"].replace([waits, replacing])
    h["workloads"].apply("MODIFIED", waits)  # capacity settles after the events
    fits = {dict(k)["workload"] for k in family_series(ex, "gangscope_workload_fit")}
    assert fits == {"waits"}
    poller = QueuePositionPoller(None, store, Exposition())  # type: ignore[arg-type]
    assert poller.pending_cluster_queues() == {"cq"}
    assert poller.pending_local_queues() == {("team", "q", "cq")}
    h["workloads"].apply("DELETED", waits)
    assert poller.pending_cluster_queues() == set()
