"""explain's admission text for states Kueue writes (kueue@ff69552e): the store's records in, the sentence out (and once live, against the simulated API server)."""

from __future__ import annotations

from typing import Any

from exporter.explain import admission_layer
from kueue_objects import admitted_conditions, cond, local_queue, node, topology, workload
from test_evictions import HOSTS, collector, evicted


def test_pending_again_after_a_node_failure_names_the_eviction_and_the_node() -> None:
    """The node controller marks h3 unhealthy, the eviction patch clears it (evict.go:205-209);
    the job reconciler requeues the Workload with the Evicted message as QuotaReserved's
    (jobframework/reconciler.go:604-620): explain names the eviction and h3."""
    _, store, h = collector()
    h["localqueues"].replace([local_queue("q", "team", "cq")])
    h["workloads"].replace([workload(hosts=HOSTS, conditions=admitted_conditions(), unhealthy=["h3"])])
    msg = "Workload eviction triggered due to multiple TAS assigned node failures, including: h3"
    h["workloads"].apply("MODIFIED", evicted(message=msg))
    requeued = evicted(message=msg, admitted=False)
    requeued["status"]["conditions"] = [cond("QuotaReserved", "False", "Pending", message=msg),
                                        cond("Evicted", "True", "NodeFailures", "2026-08-20T11:00:00Z", msg)]
    h["workloads"].apply("MODIFIED", requeued)
    layer = admission_layer(store.workload("team", "wl"))
    assert layer["status"] == "blocking"
    assert layer["summary"] == ("queued in cq (queue q): waiting to be evaluated (Pending): " + msg
                                + "; evicted before (NodeFailures, failed node h3 at 2026-08-20T11:00:00Z)")
    assert layer["evidence"]["failed_nodes"] == ["h3"]


def test_delayed_topology_request_is_quota_reserved_not_admitted() -> None:
    """Admitted=False PendingDelayedTopologyRequests (pkg/workload/admissionchecks.go:39-105):
    Kueue holds the quota, the Workload is not admitted."""
    _, store, h = collector()
    h["nodes"].replace([node("h1", "b1", "r1")])
    h["topologies"].replace([topology()])
    h["workloads"].replace([workload(hosts=[], conditions=[
        cond("QuotaReserved", "True", "QuotaReserved", message="Quota reserved in ClusterQueue cq"),
        cond("Admitted", "False", "PendingDelayedTopologyRequests", message="There are pending delayed topology requests")])])
    layer = admission_layer(store.workload("team", "wl"))
    assert layer["summary"].startswith("quota reserved in cq (queue q) at 2026-08-20T10:00:00Z; admission waits")
    assert "admitted to" not in layer["summary"]


def test_a_workload_of_a_queue_without_its_flavor_says_why() -> None:
    """The flavor deleted: Kueue's queue says FlavorNotFound (clusterqueue.go:320-322), its
    Workloads "ClusterQueue cq is inactive" (workload_controller.go:2035-2036); explain puts the
    queue's own words beside the Workload's."""
    from kueue_objects import cluster_queue, flavor_not_found

    _, store, h = collector()
    h["localqueues"].replace([local_queue("q", "team", "cq")])
    h["clusterqueues"].replace([cluster_queue("cq", ("h100",), active=flavor_not_found("h100"))])
    h["workloads"].replace([workload(hosts=[], admitted_cq=None, conditions=[
        cond("QuotaReserved", "False", "Suspended", message="ClusterQueue cq is inactive")])])
    wl = store.workload("team", "wl")
    layer = admission_layer(wl, queue=store.cluster_queues["cq"])
    assert layer["summary"] == (
        "inadmissible in cq (queue q): cannot be admitted as configured (this will not clear by itself) (Suspended): "
        "ClusterQueue cq is inactive; ClusterQueue cq is not active (FlavorNotFound: Can't admit new workloads: "
        "references missing ResourceFlavor(s): h100.)")
    assert layer["evidence"]["cluster_queue_state"]["flavors"] == ["h100"]
    unknown = admission_layer(wl)
    assert unknown["summary"].endswith("whether the ClusterQueue is stopped or misconfigured is unknown (ClusterQueues not read)")


def test_the_cohort_tree_from_the_cohort_objects() -> None:
    from exporter.explain import cohort_tree
    from kueue_objects import cluster_queue

    _, store, h = collector()
    h["clusterqueues"].replace([cluster_queue("cq", cohort="team-a")])
    h["cohorts"].replace([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": n},
                           "spec": {"parentName": p} if p else {}} for n, p in (("team-a", "org"), ("org", ""))])
    assert cohort_tree(store, store.cluster_queues["cq"]) == ["team-a", "org"]
    h["cohorts"].replace([])  # a cohort needs no object (clusterqueue_types.go:88-89)
    assert cohort_tree(store, store.cluster_queues["cq"]) == ["team-a"]


async def test_live_explain_asks_the_local_queue_when_the_cluster_queue_endpoint_is_forbidden(
        tmp_path: Any, capsys: Any) -> None:
    """A user with rights in one namespace: Kueue's ClusterQueue visibility endpoint answers 403,
    the LocalQueue's (pending_workloads_lq.go) gives the position, of at least the ones seen."""
    import argparse
    import asyncio
    import json

    import structlog

    from exporter import explain
    from exporter.kube.resources import COLLECTOR_RESOURCES, QUEUE_POSITIONS
    from exporter.sim.apiserver import SimApiServer
    from test_queue_positions import pending

    sim = SimApiServer(bookmark_interval=0.2)
    await sim.start()
    try:
        for r in COLLECTOR_RESOURCES:
            sim.serve(r)
        sim.forbid(QUEUE_POSITIONS)
        sim.create(local_queue("q", "team", "gpu-cq"))
        sim.create(pending("older", 100, "2026-08-20T09:00:00Z"))
        sim.create(pending("newer", 100, "2026-08-20T09:30:00Z"))
        p = argparse.ArgumentParser()
        explain.add_arguments(p)
        args = p.parse_args(["team/newer", "--kubeconfig", sim.write_kubeconfig(str(tmp_path / "kc")), "--output", "json",
                             "--sync-timeout", "10"])
        rc = await asyncio.to_thread(explain.run, args)
        out, err = capsys.readouterr()
    finally:
        await sim.stop()
        structlog.reset_defaults()
    assert rc == 0, err
    admission = json.loads(out)["layers"][0]
    assert admission["summary"].endswith("; position 2 of at least 2 in gpu-cq (2 in queue q)"), admission["summary"]
