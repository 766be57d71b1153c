"""The lost-node judgement: a job's bound pods and the Nodes they run on -> the nodes it has lost.

Why: a node that dies under a running gang shows as its Node's Ready condition not True, and the
node lifecycle controller taints it by that condition's status: Ready Unknown (the kubelet
stopped posting status) with ``node.kubernetes.io/unreachable``, Ready False with
``node.kubernetes.io/not-ready`` (kubernetes 003e8629
pkg/controller/nodelifecycle/node_lifecycle_controller.go:70-91, ``UnreachableTaintTemplate``,
``NotReadyTaintTemplate`` and ``nodeConditionToTaintKeyStatusMap``). Kueue names such nodes in
the Workload's ``status.unhealthyNodes`` only for topology-aware Workloads with its node failure
handling on (kueue 22e45023 pkg/controller/tas/node_failure_controller.go); a job without it keeps
stage ``running`` (or, with ``waitForPodsReady``, ``recovering``), and nothing else says which
node went and which ranks went with it. That is a hardware verdict: the gang cannot train until
those pods are replaced.

Only what the objects prove is claimed: a pod whose Node is not among the objects (a dump without
Nodes, a Node deleted before its pods) or whose Node reports no Ready condition (read as metadata
only) is not called lost.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .pods import Pod

# The node lifecycle controller's taints (node_lifecycle_controller.go:70-81, above).
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """What the judgement reads of a Node: its Ready condition, its taint keys and its topology path."""

    name: str
    ready: bool
    taints: tuple[str, ...] = ()
    path: tuple[tuple[str, str], ...] = ()  # (level label, value), top first; () where the node has none


@dataclass(frozen=True, slots=True)
class LostNode:
    node: str
    why: str  # "unreachable" (Ready Unknown), "not ready" (Ready False) or "not ready, not yet tainted"
    path: tuple[tuple[str, str], ...]
    pods: tuple[str, ...]  # the job's pods bound to it, by name


def why(h: NodeHealth) -> str:
    """Why a not-Ready node is not: the node lifecycle controller's taint says which condition."""
    return "unreachable" if UNREACHABLE in h.taints else "not ready" if NOT_READY in h.taints else "not ready, not yet tainted"


def lost_nodes(pods: Iterable[Pod], health: Callable[[str], NodeHealth | None]) -> list[LostNode]:
    """The nodes of the job's bound, not terminating pods whose Node is known and not Ready, by name."""
    on: dict[str, list[str]] = {}
    for p in pods:
        if p.bound and not p.terminating:
            on.setdefault(p.node, []).append(p.name)
    out = []
    for node in sorted(on):
        h = health(node)
        if h is None or h.ready:
            continue
        out.append(LostNode(node, why(h), h.path, tuple(sorted(on[node]))))
    return out
