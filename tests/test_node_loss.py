"""The lost-node judgement on records alone (exporter/cluster/node_loss.py)."""

from __future__ import annotations

from exporter.cluster.node_loss import NOT_READY, UNREACHABLE, LostNode, NodeHealth, lost_nodes
from exporter.cluster.pods import Pod


def pod(name: str, node: str, phase: str = "Running", terminating: bool = False) -> Pod:
    return Pod("ml", name, f"uid-{name}", node, phase, True, 8.0, None, "wl", None, None, "", 1, terminating=terminating)


HEALTH = {
    "n-ok": NodeHealth("n-ok", True, (), (("rack", "r1"), ("host", "n-ok"))),
    "n-gone": NodeHealth("n-gone", False, (UNREACHABLE,), (("rack", "r2"), ("host", "n-gone"))),
    "n-sick": NodeHealth("n-sick", False, (NOT_READY,), ()),
    "n-new": NodeHealth("n-new", False, (), ()),
}


def test_lost_nodes_names_each_not_ready_node_with_the_pods_on_it() -> None:
    pods = [pod("w-0", "n-ok"), pod("w-1", "n-gone"), pod("w-2", "n-gone"), pod("w-3", "n-sick"), pod("w-4", "n-new"),
            pod("w-5", "n-unknown")]
    assert lost_nodes(pods, HEALTH.get) == [
        LostNode("n-gone", "unreachable", (("rack", "r2"), ("host", "n-gone")), ("w-1", "w-2")),
        LostNode("n-new", "not ready, not yet tainted", (), ("w-4",)),
        LostNode("n-sick", "not ready", (), ("w-3",)),
    ]


def test_finished_terminating_and_unbound_pods_lose_no_node() -> None:
    pods = [pod("done", "n-gone", phase="Succeeded"), pod("going", "n-gone", terminating=True), pod("pending", "")]
    assert lost_nodes(pods, HEALTH.get) == []
    assert lost_nodes([pod("w-0", "n-ok")], HEALTH.get) == []
