"""The store's handlers take LISTs page by page (the informer's paged protocol): a relist that
fails midway deletes nothing, and Workloads arriving between two pages of the Node list are
placed with the labels of every Node seen so far."""

from __future__ import annotations

from exporter.cluster.store import ClusterStore
from exporter.exposition import Exposition
from kueue_objects import admitted_conditions, node, series, topology, workload

PODS = "gangscope_workload_topology_pods"


def pods(expo: Exposition, name: str, host: str) -> dict[str, str]:
    for metric, labels in series(expo.render(False).decode()):
        d = dict(labels)
        if metric == PODS and d["workload"] == name and d["host"] == host:
            return d
    raise AssertionError(f"no {PODS} for {name} on {host}")


def test_workload_between_node_pages_gets_the_full_path() -> None:
    expo = Exposition()
    store = ClusterStore(expo)
    h = store.handlers()
    h["topologies"].replace([topology()])
    h["workloads"].replace([workload("early", hosts=["n1"], conditions=admitted_conditions())])
    nodes = h["nodes"]
    nodes.begin_replace()
    nodes.add_page([node("n1", "b1", "r1")])
    # Placed while the node LIST is still open, on the same host as "early" (whose path without
    # the Node's labels was cached): it must see n1's labels.
    h["workloads"].apply("ADDED", workload("between", hosts=["n1"], conditions=admitted_conditions()))
    nodes.add_page([node("n2", "b1", "r2")])
    nodes.end_replace(True)
    for name in ("early", "between"):
        got = pods(expo, name, "n1")
        assert (got["block"], got["rack"]) == ("b1", "r1"), (name, got)


def test_failed_list_deletes_nothing_and_a_complete_one_deletes_once() -> None:
    expo = Exposition()
    store = ClusterStore(expo)
    wl = store.handlers()["workloads"]
    wl.replace([workload(n, conditions=admitted_conditions()) for n in ("a", "b", "c")])
    wl.begin_replace()
    wl.add_page([workload("a", conditions=admitted_conditions())])
    wl.end_replace(False)  # the list broke after its first page
    assert set(store.workloads) == {("team", "a"), ("team", "b"), ("team", "c")}
    wl.begin_replace()
    wl.add_page([workload("a", conditions=admitted_conditions())])
    wl.add_page([workload("c", conditions=admitted_conditions())])
    wl.end_replace(True)
    assert set(store.workloads) == {("team", "a"), ("team", "c")}
    assert 'workload="b"' not in expo.render(False).decode()  # its series went with it
