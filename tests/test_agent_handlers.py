"""The agent's informer handlers: pods on this node and its own Node (replace/apply protocol)."""

from __future__ import annotations

import pytest

from exporter.node.nodeinfo import NodeTopology
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
