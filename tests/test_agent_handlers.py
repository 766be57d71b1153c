"""The agent's informer handlers: pods on this node, its own Node and the Kueue Topologies
(replace/apply protocol)."""

from __future__ import annotations

import pytest

from exporter.cluster.collector import build_collector
from exporter.exposition import Exposition
from exporter.node.nodeinfo import NodeTopology, TopologyLevelsWatch
from exporter.node.pods import PodIndex, PodMeta, pod_key_and_meta
from exporter.topology import TopologyLevels


def pod(name: str, labels=None, annotations=None, spec=None, namespace: str = "ns") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels or {}, "annotations": annotations or {}},
            "spec": spec or {}}


@pytest.mark.parametrize(("obj", "meta"), [
    (pod("a", {"kueue.x-k8s.io/podset": "workers", "scheduling.x-k8s.io/pod-group": "pg"}, {"kueue.x-k8s.io/workload": "wl"}),
     PodMeta("wl", "workers", "pg")),
    (pod("b", {"pod-group.scheduling.sigs.k8s.io": "legacy"}), PodMeta("", "", "legacy")),
    (pod("c", annotations={"scheduling.k8s.io/group-name": "volcano"}), PodMeta("", "", "volcano")),
    (pod("d", spec={"schedulingGroup": {"podGroupName": "native"}}), PodMeta("", "", "native")),
    (pod("k", annotations={"pod-group-name": "kai-gang"}), PodMeta("", "", "kai-gang")),  # KAI's annotation (kai-pod-linking.md)
    (pod("e", {"scheduling.x-k8s.io/pod-group": "label-wins"}, {"scheduling.k8s.io/group-name": "v"}), PodMeta("", "", "label-wins")),
    ({"metadata": {"name": "f", "namespace": "ns"}}, PodMeta()),
])
def test_pod_keys(obj: dict, meta: PodMeta) -> None:
    assert pod_key_and_meta(obj) == (("ns", obj["metadata"]["name"]), meta)


@pytest.mark.parametrize("bad", [
    {}, {"metadata": "x"}, {"metadata": {"name": ""}}, {"metadata": {"name": "x", "labels": ["a"]}},
    {"metadata": {"name": "x", "annotations": {"kueue.x-k8s.io/workload": 5}}},
])
def test_malformed_pods_raise_value_error(bad: dict) -> None:
    with pytest.raises(ValueError):
        pod_key_and_meta(bad)


def test_pod_index_replace_apply_delete_and_change_notifications() -> None:
    calls: list[int] = []
    idx = PodIndex(lambda: calls.append(1))
    with pytest.raises(ValueError, match="1 malformed"):
        idx.replace([pod("a", annotations={"kueue.x-k8s.io/workload": "wl"}), {"metadata": {}}])
    assert idx.get("ns", "a") == PodMeta("wl") and calls == [1]  # the good pod is kept
    idx.apply("MODIFIED", pod("a", annotations={"kueue.x-k8s.io/workload": "wl"}))
    assert calls == [1], "an unchanged pod does not re-render"
    idx.apply("ADDED", pod("b", {"kueue.x-k8s.io/podset": "p"}))
    assert idx.get("ns", "b") == PodMeta("", "p") and calls == [1, 1]
    idx.apply("DELETED", pod("a"))
    assert idx.get("ns", "a") == PodMeta() and calls == [1, 1, 1]
    idx.replace([])
    assert idx.pods == {} and len(calls) == 4


def test_node_topology_follows_the_node_and_ignores_others() -> None:
    levels = TopologyLevels.build(["cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"])
    calls: list[int] = []
    topo = NodeTopology("n1", levels, lambda: calls.append(1))
    assert topo.labels == (("node", "n1"), ("block", ""), ("rack", ""), ("host", "n1"))
    node = {"metadata": {"name": "n1", "labels": {"cloud.provider.com/topology-block": "b1",
                                                  "cloud.provider.com/topology-rack": "r1", "kubernetes.io/hostname": "n1-host"}}}
    topo.replace([{"metadata": {"name": "other", "labels": {"cloud.provider.com/topology-rack": "zz"}}}, node])
    assert topo.labels == (("node", "n1"), ("block", "b1"), ("rack", "r1"), ("host", "n1-host")) and calls == [1]
    topo.apply("MODIFIED", {"metadata": {"name": "other", "labels": {}}})
    assert calls == [1]
    node["metadata"]["labels"]["cloud.provider.com/topology-rack"] = "r2"
    topo.apply("MODIFIED", node)
    assert dict(topo.labels)["rack"] == "r2" and calls == [1, 1]
    topo.apply("DELETED", node)
    assert topo.labels == (("node", "n1"), ("block", ""), ("rack", ""), ("host", "n1")) and calls == [1, 1, 1]
    with pytest.raises(ValueError):
        topo.apply("MODIFIED", {"metadata": {"name": "n1", "labels": {"a": 1}}})


BLOCK, RACK, ZONE = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "example.com/topology-zone"
HOST = "kubernetes.io/hostname"


def topology(name: str, *keys: str) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": k} for k in keys]}}


def watch(overrides: dict | None = None) -> tuple[TopologyLevelsWatch, NodeTopology, list[int]]:
    calls: list[int] = []
    node = NodeTopology("n1", TopologyLevels.build([]), lambda: calls.append(1))
    node.replace([{"metadata": {"name": "n1", "labels": {BLOCK: "b1", RACK: "r1", ZONE: "z1", HOST: "h1"}}}])
    return TopologyLevelsWatch(node, overrides or {}), node, calls


def test_topology_watch_merges_levels_and_relabels_on_change() -> None:
    w, node, calls = watch({RACK: "rack_id"})
    assert node.labels == (("node", "n1"), ("host", "h1")) and calls == [1]
    w.replace([topology("b-racks", RACK, HOST), topology("a-blocks", BLOCK, RACK, HOST)])
    assert node.labels == (("node", "n1"), ("block", "b1"), ("rack_id", "r1"), ("host", "h1")) and calls == [1, 1]
    w.apply("MODIFIED", topology("a-blocks", BLOCK, RACK, HOST))
    assert calls == [1, 1], "unchanged levels do not re-render"
    w.apply("ADDED", topology("c-zones", ZONE, BLOCK))
    assert [k for k, _ in node.labels] == ["node", "zone", "block", "rack_id", "host"] and calls == [1, 1, 1]
    w.apply("DELETED", topology("a-blocks"))
    w.apply("DELETED", topology("c-zones"))
    assert node.labels == (("node", "n1"), ("rack_id", "r1"), ("host", "h1")) and len(calls) == 5
    w.replace([])
    assert node.labels == (("node", "n1"), ("host", "h1"))


def test_topology_watch_counts_bad_objects_and_keeps_levels_on_alias_clash() -> None:
    w, node, _ = watch({"other.io/a": "pod_block", "other.io/b": "pod_block"})  # two overrides, one name
    with pytest.raises(ValueError, match="without metadata.name"):
        w.replace([topology("ok", BLOCK, HOST), {"metadata": {}}])
    assert [k for k, _ in node.labels] == ["node", "block", "host"]
    with pytest.raises(ValueError, match="nodeLabel missing"):
        w.apply("ADDED", {"metadata": {"name": "partial"}, "spec": {"levels": [{}, {"nodeLabel": RACK}]}})
    assert [k for k, _ in node.labels] == ["node", "block", "rack", "host"]  # the good level is used
    with pytest.raises(ValueError, match="rejected"):
        w.apply("ADDED", topology("clash", "other.io/a", "other.io/b"))
    assert [k for k, _ in node.labels] == ["node", "block", "rack", "host"]
    w.apply("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    with pytest.raises(ValueError):
        w.apply("MODIFIED", {"metadata": {"name": 5}})
    assert "ok" in w.topologies, "an unparsable update keeps the previous version"


@pytest.mark.parametrize("objects", [
    [topology("racks", RACK, HOST), topology("blocks", BLOCK, RACK, HOST)],
    [topology("z", ZONE, HOST), topology("a", BLOCK, RACK)],
    [topology("one", HOST, BLOCK), topology("two", RACK)],
    [],
])
def test_topology_watch_levels_are_the_collectors(objects: list[dict]) -> None:
    """The same Topologies give the agent and the collector the same levels and label names."""
    store, handlers, _ = build_collector(Exposition(), alias_overrides={RACK: "rack_id"})
    handlers["topologies"].replace(objects)
    w, node, _ = watch({RACK: "rack_id"})
    w.replace(objects)
    assert node.levels == store.levels
