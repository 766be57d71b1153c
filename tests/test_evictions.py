"""Evictions where they happened (exporter.cluster.evictions), from the objects Kueue writes.

A gang on h1, h2 (rack r1) and h3 (rack r2). Kueue's node controller lists a failed node in
``status.unhealthyNodes`` (kueue@ff69552e pkg/controller/tas/node_controller.go), and the eviction
patch clears that list while it sets Evicted and raises the count (pkg/workload/evict/evict.go:
178-185, 205-209): the failed node is known from the record before the eviction, or from the
message of the Evicted condition (node_controller.go:69, 494-496; scheduler.go:927-929).
"""

from __future__ import annotations

from typing import Any

import pytest

from exporter.cluster.collector import build_collector
from exporter.cluster.evictions import eviction_domains, failed_nodes, message_nodes
from exporter.cluster.workloads import parse_workload
from exporter.exposition import Exposition
from exporter.health import SourceHealth
from kueue_objects import admitted_conditions, cond, node, series, topology, workload

HOSTS = ["h1", "h2", "h3"]
MULTIPLE = "Workload eviction triggered due to multiple TAS assigned node failures, including: {}"
NO_REPLACEMENT = "Workload was evicted as there was no replacement for unhealthy node(s): {}"


def collector() -> tuple[Exposition, Any, dict[str, Any]]:
    expo = Exposition()
    store, handlers, _ = build_collector(expo)
    for name, h in handlers.items():
        h.health = SourceHealth(name, expo)
    handlers["topologies"].replace([topology()])
    handlers["nodes"].replace([node("h1", "b1", "r1"), node("h2", "b1", "r1"), node("h3", "b1", "r2")])
    return expo, store, handlers


def evicted(reason: str = "NodeFailures", message: str = "", hosts: list[str] | None = None, admitted: bool = True,
            count: int = 1) -> dict[str, Any]:
    """The eviction patch: Evicted=True, the count raised, unhealthyNodes cleared; admission kept
    (``admitted``) until the job is stopped, or already cleared."""
    conds = [*admitted_conditions(), cond("Evicted", "True", reason, "2026-08-20T11:00:00Z", message)]
    return workload(hosts=hosts if hosts is not None else HOSTS, admitted_cq="cq" if admitted else None, conditions=conds,
                    evictions=[{"reason": reason, "underlyingCause": "", "count": count}])


def racks(expo: Exposition) -> dict[str, float]:
    return {dict(k[1]).get("rack", ""): v for k, v in series(expo.render(False).decode()).items()
            if k[0] == "gangscope_topology_evictions_total"}


@pytest.mark.parametrize("message, unhealthy, expected", [
    # the node controller's unhealthyNodes, cleared by the eviction: only h3's rack
    ("", ["h3"], {"r2": 1}),
    # the message alone names them (node_controller.go:494-496: the known ones and the new one)
    (MULTIPLE.format("h3, h1"), None, {"r1": 1, "r2": 1}),
    (MULTIPLE.format("h2"), None, {"r1": 1}),
    # TASFailedNodeReplacementFailFast (scheduler.go:927-929), comma-separated
    (NO_REPLACEMENT.format("h3"), None, {"r2": 1}),
    # neither: every rack of the placement
    ("", None, {"r1": 1, "r2": 1}),
])
def test_node_failures_count_in_the_failed_nodes_domains(message: str, unhealthy: list[str] | None,
                                                          expected: dict[str, float]) -> None:
    expo, store, h = collector()
    h["workloads"].replace([workload(hosts=HOSTS, conditions=admitted_conditions(), unhealthy=unhealthy)])
    h["workloads"].apply("MODIFIED", evicted(message=message))
    assert racks(expo) == expected
    assert store.workload("team", "wl").failed_nodes == tuple(dict.fromkeys((*(unhealthy or ()), *message_nodes(message))))


def test_other_reasons_count_in_every_domain_of_the_placement() -> None:
    expo, _, h = collector()
    h["workloads"].replace([workload(hosts=HOSTS, conditions=admitted_conditions(), unhealthy=["h3"])])
    h["workloads"].apply("MODIFIED", evicted("Preempted", "Preempted to accommodate a workload"))
    assert racks(expo) == {"r1": 1, "r2": 1}


def test_eviction_first_seen_after_readmission_counts_where_it_was_evicted_from() -> None:
    """A relist (or a missed event) shows the Workload admitted again on h3 with the count raised:
    the eviction happened on h1 and h2, where it ran before."""
    expo, _, h = collector()
    h["workloads"].replace([workload(hosts=["h1", "h2"], conditions=admitted_conditions())])
    readmitted = workload(hosts=["h3"], conditions=admitted_conditions(),
                          evictions=[{"reason": "Preempted", "underlyingCause": "", "count": 1}])
    h["workloads"].replace([readmitted])
    assert racks(expo) == {"r1": 1}


def test_a_failed_node_that_is_gone_counts_in_its_own_domain_not_the_healthy_ones() -> None:
    """The failed Node deleted before the eviction: its rack is no longer known (the placement's
    path for h3 loses its upper levels), so the eviction counts in that unknown domain, found by
    the hostname, and never in r1, where nothing failed."""
    expo, _, h = collector()
    h["workloads"].replace([workload(hosts=HOSTS, conditions=admitted_conditions(), unhealthy=["h3"])])
    h["nodes"].apply("DELETED", node("h3", "b1", "r2"))
    h["workloads"].apply("MODIFIED", evicted(admitted=False))
    assert racks(expo) == {"": 1}


def test_the_pure_judgement() -> None:
    prev = parse_workload(workload(hosts=HOSTS, conditions=admitted_conditions(), unhealthy=["h1"]))
    wl = parse_workload(evicted(message=MULTIPLE.format("h1, h3"), admitted=False))
    assert failed_nodes(prev, wl) == ("h1", "h3")
    assert message_nodes("Preempted to accommodate a workload") == ()
    # without the placement (the store passes it) the domains come from the Nodes alone
    domains = {"h1": (("rack", "r1"),), "h3": (("rack", "r2"),)}
    assert eviction_domains("NodeFailures", prev, wl, 1, domains.get) == ({(("rack", "r1"),), (("rack", "r2"),)}, True)
    assert eviction_domains("NodeFailures", prev, wl, 1, {}.get) == (set(), False)


def test_a_deactivated_workload_evicted_counts_in_its_domains() -> None:
    """spec.active=false retires a Workload at once (its detail and placement go) while it still
    holds its assignment; Kueue's eviction that follows is still charged to the racks it ran in,
    from the placement the store makes of the record before it."""
    expo, store, h = collector()
    h["workloads"].replace([workload(hosts=HOSTS, conditions=admitted_conditions())])
    inactive = workload(hosts=HOSTS, conditions=admitted_conditions(), active=False)
    h["workloads"].apply("MODIFIED", inactive)
    assert store.workload("team", "wl").stage == "deactivated"
    retired = store.workload("team", "wl")
    assert all(not a.placed for a in retired.last_assignments)  # retired: not kept placed
    assert [path for a in retired.last_assignments for path, _ in store.placement(retired, a)] == [
        (("block", "b1"), ("rack", "r1"), ("host", "h1")), (("block", "b1"), ("rack", "r1"), ("host", "h2")),
        (("block", "b1"), ("rack", "r2"), ("host", "h3"))]  # placed when asked, as explain asks
    gone = evicted("InactiveWorkload", admitted=False)
    gone["spec"]["active"] = False
    h["workloads"].apply("MODIFIED", gone)
    assert racks(expo) == {"r1": 1, "r2": 1}
