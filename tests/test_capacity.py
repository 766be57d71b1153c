"""GPU capacity, use and free space per topology domain; fit and fragmentation of waiting jobs.

Every expected number is worked out by hand from the objects in the test (their comments show
the arithmetic): Nodes in, the exposition lines a user would read out.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import pytest

import yaml

from exporter import snapshot
from exporter.cluster import capacity as capacity_module
from exporter.cluster.capacity import parse_sizes
from exporter.cluster.clusterqueues import parse_cluster_queue
from exporter.cluster.collector import build_collector
from exporter.cluster.nodes import parse_node
from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.loader import load_path
from exporter.taints import Taint, Toleration
from kueue_objects import (
    BLOCK, HOST, RACK, admitted_conditions, cluster_queue, cond, fixture, flavor, gpu_node, local_queue, series, topology,
    workload,
)

NODES = Path(__file__).resolve().parent / "fixtures" / "nodes" / "gpu-nodes.yaml"
MAINTENANCE = {"key": "maintenance.example.com/drain", "value": "true", "effect": "NoExecute"}
# The GPU operator's taint on every gpu_node: Kueue's placement tolerates only what the pod
# template and the flavor tolerate (tas_flavor_snapshot.go:961), so a pod set must say it.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# What the ClusterQueue watch records (its flavors in spec order): the fit's only source of a
# Workload's flavors.
QUEUES = {name: parse_cluster_queue(cluster_queue(name)) for name in ("train-cq", "cq")}


GANGS: dict[int, Any] = {}  # id(store) -> its gang index (explain's diagnose needs both)


def collector(**kwargs: Any) -> tuple[Exposition, Any, dict[str, Any]]:
    expo = Exposition()
    store, handlers, gangs = build_collector(expo, **kwargs)
    GANGS[id(store)] = gangs
    store.cluster_queues = dict(QUEUES)
    for name, h in handlers.items():
        h.health = SourceHealth(name, expo)
    return expo, store, handlers


def values(expo: Exposition, family: str) -> dict[tuple[tuple[str, str], ...], float]:
    """{sorted labels: value} of one family."""
    return {tuple(sorted(labels)): v for (name, labels), v in series(expo.render(False).decode()).items() if name == family}


def gpus(expo: Exposition, level: str, *path: str) -> dict[str, float]:
    """``state -> GPUs`` of one domain, ``path`` the values from the top level down to ``level``."""
    names = ("block", "rack", "host")[: len(path)]
    want = {("level", level), *zip(names, path)}
    return {dict(k)["state"]: v for k, v in values(expo, "gangscope_domain_gpus").items()
            if {p for p in k if p[0] != "state"} == want}


def placeable(expo: Exposition, level: str, *path: str) -> dict[int, float]:
    names = ("block", "rack", "host")[: len(path)]
    want = {("level", level), *zip(names, path)}
    return {int(dict(k)["gpus_per_pod"]): v for k, v in values(expo, "gangscope_domain_placeable_pods").items()
            if {p for p in k if p[0] != "gpus_per_pod"} == want}


def domains(expo: Exposition, level: str) -> dict[str, float]:
    return {dict(k)["state"]: v for k, v in values(expo, "gangscope_domains").items() if ("level", level) in k}


def fit(expo: Exposition, name: str, ns: str = "team") -> dict[str, float]:
    return {dict(k)["scope"]: v for k, v in values(expo, "gangscope_workload_fit").items()
            if ("workload", name) in k and ("namespace", ns) in k}


def blocked(expo: Exposition) -> dict[tuple[str, str], float]:
    return {(dict(k)["cluster_queue"], dict(k)["level"]): v
            for k, v in values(expo, "gangscope_fragmentation_blocked_workloads").items()}


def waiting(name: str, pods: int, gpus_per_pod: int, topology_request: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """A Workload waiting for its first evaluation (no QuotaReserved yet) in queue q, tolerating the GPU taint."""
    kw["tolerations"] = [*kw.get("tolerations", []), GPU_TOLERATION]
    return workload(name, hosts=[], count=pods, gpus=str(gpus_per_pod), admitted_cq=None, topology=topology_request, **kw)


def no_placement(wl: dict[str, Any], at: str = "2026-12-01T10:00:00Z", legacy: bool = False) -> dict[str, Any]:
    """``wl`` as Kueue writes it after a topology placement failure (typed reason, or the legacy
    Pending with the placement's message, tas_flavor_snapshot.go:2006-2011)."""
    message = 'couldn\'t assign flavors to pod set main: topology "default" doesn\'t allow to fit any of 2 pod(s)'
    wl["status"] = {"conditions": [cond("QuotaReserved", "False", "Pending" if legacy else "TopologyPlacementFailed",
                                        at=at, message=message)]}
    return wl


def cluster() -> tuple[Exposition, Any, dict[str, Any]]:
    """block b1: rack r1 (h1, h2), rack r2 (h3, cordoned); block b2: rack r3 (h4 tainted for
    maintenance, h5 NotReady, c1 without GPUs). 8 GPUs each. Workload a: 1 pod x 4 GPUs on h1 and
    on h2; b: 1 pod x 8 GPUs on h5 (a NotReady node still holds what Kueue assigned)."""
    expo, store, h = collector()
    h["topologies"].replace([topology()])
    h["resourceflavors"].replace([flavor("tas")])
    h["localqueues"].replace([local_queue("q", "team", "train-cq")])
    cpu = gpu_node("c1", "b2", "r3")
    del cpu["status"]["allocatable"]["nvidia.com/gpu"], cpu["status"]["capacity"]["nvidia.com/gpu"]
    h["nodes"].replace([
        gpu_node("h1", "b1", "r1"), gpu_node("h2", "b1", "r1"), gpu_node("h3", "b1", "r2", unschedulable=True),
        gpu_node("h4", "b2", "r3", taints=[MAINTENANCE]), gpu_node("h5", "b2", "r3", ready="Unknown"), cpu,
    ])
    h["workloads"].replace([
        workload("a", hosts=["h1", "h2"], gpus="4", conditions=admitted_conditions()),
        workload("b", hosts=["h5"], gpus="8", conditions=admitted_conditions()),
    ])
    return expo, store, h


def test_capacity_unavailable_used_free_per_domain() -> None:
    expo, _, _ = cluster()
    # hosts (their free GPUs are recorded from these): h1, h2 8 GPUs, 4 used, 4 free; h3 cordoned,
    # h4 tainted, h5 NotReady: all 8 unavailable
    assert gpus(expo, "host", "b1", "r1", "h1") == {"capacity": 8, "unavailable": 0, "used": 4}
    assert gpus(expo, "host", "b1", "r2", "h3") == {"capacity": 8, "unavailable": 8, "used": 0}
    assert gpus(expo, "host", "b2", "r3", "h4") == {"capacity": 8, "unavailable": 8, "used": 0}
    assert gpus(expo, "host", "b2", "r3", "h5") == {"capacity": 8, "unavailable": 8, "used": 8}
    assert gpus(expo, "host", "b2", "r3", "c1") == {}  # no GPU resource: not a domain of the GPU accounting
    # r1 = h1 + h2; r3 = h4 + h5; b1 = r1 + r2; b2 = r3
    assert gpus(expo, "rack", "b1", "r1") == {"capacity": 16, "unavailable": 0, "used": 8, "free": 8}
    assert gpus(expo, "rack", "b1", "r2") == {"capacity": 8, "unavailable": 8, "used": 0, "free": 0}
    assert gpus(expo, "rack", "b2", "r3") == {"capacity": 16, "unavailable": 16, "used": 8, "free": 0}
    assert gpus(expo, "block", "b1") == {"capacity": 24, "unavailable": 8, "used": 8, "free": 8}
    assert gpus(expo, "block", "b2") == {"capacity": 16, "unavailable": 16, "used": 8, "free": 0}
    # r1 has 8 free GPUs but, 4 on each host, no room for one 8-GPU pod
    assert placeable(expo, "rack", "b1", "r1") == {1: 8, 2: 4, 4: 2, 8: 0}
    assert placeable(expo, "host", "b1", "r1", "h2") == {}  # a host's: free // size, recorded by the capacity rules
    assert placeable(expo, "block", "b2") == {1: 0, 2: 0, 4: 0, 8: 0}
    assert domains(expo, "block") == {"free": 0, "partial": 1, "full": 0, "unavailable": 1}
    assert domains(expo, "rack") == {"free": 0, "partial": 1, "full": 0, "unavailable": 2}
    assert domains(expo, "host") == {"free": 0, "partial": 2, "full": 0, "unavailable": 3}


def test_changes_move_the_numbers_incrementally() -> None:
    expo, store, h = cluster()
    h["nodes"].apply("MODIFIED", gpu_node("h3", "b1", "r2"))  # uncordoned
    assert gpus(expo, "rack", "b1", "r2") == {"capacity": 8, "unavailable": 0, "used": 0, "free": 8}
    assert gpus(expo, "block", "b1") == {"capacity": 24, "unavailable": 0, "used": 8, "free": 16}
    assert domains(expo, "rack") == {"free": 1, "partial": 1, "full": 0, "unavailable": 1}
    h["workloads"].apply("MODIFIED", workload("c", hosts=["h3"], gpus="8", conditions=admitted_conditions()))
    assert gpus(expo, "rack", "b1", "r2") == {"capacity": 8, "unavailable": 0, "used": 8, "free": 0}
    assert domains(expo, "rack") == {"free": 0, "partial": 1, "full": 1, "unavailable": 1}
    # deactivating or finishing releases the GPUs (Kueue: HasActiveQuotaReservation, workload.go:1304-1306)
    h["workloads"].apply("MODIFIED", workload("c", hosts=["h3"], gpus="8", conditions=admitted_conditions(), active=False))
    assert gpus(expo, "rack", "b1", "r2")["used"] == 0
    h["workloads"].apply("MODIFIED", workload("c", hosts=["h3"], gpus="8", conditions=admitted_conditions()))
    assert gpus(expo, "rack", "b1", "r2")["used"] == 8
    done = workload("c", hosts=["h3"], gpus="8", conditions=[*admitted_conditions(), cond("Finished", "True", "Succeeded")])
    h["workloads"].apply("MODIFIED", done)
    assert gpus(expo, "rack", "b1", "r2")["used"] == 0
    h["workloads"].apply("DELETED", done)
    h["workloads"].apply("DELETED", workload("a"))
    assert gpus(expo, "block", "b1") == {"capacity": 24, "unavailable": 0, "used": 0, "free": 24}
    assert domains(expo, "block") == {"free": 1, "partial": 0, "full": 0, "unavailable": 1}
    # a node that goes away takes its domains' lines with it
    h["nodes"].apply("DELETED", gpu_node("h3", "b1", "r2"))
    assert gpus(expo, "rack", "b1", "r2") == {}
    assert gpus(expo, "block", "b1")["capacity"] == 16
    # a node relabelled into another rack moves its GPUs there
    h["nodes"].apply("MODIFIED", gpu_node("h2", "b1", "r9"))
    assert gpus(expo, "rack", "b1", "r1")["capacity"] == 8
    assert gpus(expo, "rack", "b1", "r9") == {"capacity": 8, "unavailable": 0, "used": 0, "free": 8}
    assert set(store.capacity.hosts) == {"h1", "h2", "h4", "h5"}


def test_unhealthy_nodes_of_a_workload_are_unavailable() -> None:
    """Kueue lists a failed node in status.unhealthyNodes while it looks for a replacement: no new
    pod should go there; the node is available again when no Workload lists it."""
    expo, _, h = cluster()
    listing = workload("a", hosts=["h1", "h2"], gpus="4", conditions=admitted_conditions(), unhealthy=["h1"])
    h["workloads"].apply("MODIFIED", listing)
    assert gpus(expo, "host", "b1", "r1", "h1") == {"capacity": 8, "unavailable": 8, "used": 4}
    assert gpus(expo, "rack", "b1", "r1") == {"capacity": 16, "unavailable": 8, "used": 8, "free": 4}
    h["workloads"].apply("MODIFIED", workload("a", hosts=["h1", "h2"], gpus="4", conditions=admitted_conditions()))
    assert gpus(expo, "host", "b1", "r1", "h1")["unavailable"] == 0


def test_flavor_tolerations_make_a_tainted_node_available() -> None:
    """Kueue adds the ResourceFlavor's tolerations to the pods it admits there
    (tas_flavor_snapshot.go:961): a taint they tolerate costs no capacity."""
    expo, _, h = cluster()
    tolerate = [{"key": "maintenance.example.com/drain", "operator": "Exists"}]
    h["resourceflavors"].replace([flavor("tas", tolerations=tolerate)])
    assert gpus(expo, "host", "b2", "r3", "h4") == {"capacity": 8, "unavailable": 0, "used": 0}
    # a flavor whose nodeLabels do not select h4 tolerates nothing there
    h["resourceflavors"].replace([flavor("tas"), flavor("other", node_labels={"pool": "x"}, tolerations=tolerate)])
    assert gpus(expo, "host", "b2", "r3", "h4")["unavailable"] == 8


def test_fit_and_fragmentation_of_waiting_workloads() -> None:
    expo, _, h = cluster()
    h["workloads"].apply("ADDED", waiting("small", 2, 4, {"required": RACK}))
    h["workloads"].apply("ADDED", no_placement(waiting("big", 2, 8, {"required": RACK})))
    h["workloads"].apply("ADDED", waiting("quota", 2, 8, {"required": RACK}))  # waits for quota, same request
    # small: r1 takes two 4-GPU pods (h1, h2: 4 free each). big: no rack has an 8-GPU pod's room
    assert fit(expo, "small") == {"domain": 1, "cluster": 1}
    assert fit(expo, "big") == {"domain": 0, "cluster": 0}
    assert blocked(expo) == {}
    h["nodes"].apply("MODIFIED", gpu_node("h3", "b1", "r2"))  # r2: one 8-GPU pod
    assert fit(expo, "big") == {"domain": 0, "cluster": 0}
    h["resourceflavors"].replace([flavor("tas", tolerations=[{"key": "maintenance.example.com/drain", "operator": "Exists"}])])
    # r3 now takes one too (h4); two racks with one each: the cluster holds big, no rack does.
    # Only big counts as blocked: quota's Kueue reason is not topological (it waits for quota).
    assert fit(expo, "big") == {"domain": 0, "cluster": 1} == fit(expo, "quota")
    assert blocked(expo) == {("train-cq", "rack"): 1}
    h["workloads"].apply("DELETED", workload("a"))  # r1: h1 and h2 empty, two 8-GPU pods
    # The model places big now, but Kueue said no and gangscope (offline) saw nothing freed
    # since: no claim. quota, without a Kueue verdict, fits.
    assert fit(expo, "big") == {}
    assert fit(expo, "quota") == {"domain": 1, "cluster": 1}
    assert blocked(expo) == {}
    # admitted: no longer waiting, no fit series
    h["workloads"].apply("MODIFIED", workload("quota", hosts=["h1", "h2"], gpus="8", conditions=admitted_conditions(),
                                              topology={"required": RACK}))
    assert fit(expo, "quota") == {}
    assert gpus(expo, "rack", "b1", "r1")["free"] == 0


def test_legacy_pending_with_a_placement_message_is_topological() -> None:
    """Without UnadmittedWorkloadsObservability Kueue writes reason Pending with the placement's
    message: the same fragmentation verdict as the typed reason."""
    expo, _, h = cluster()
    h["resourceflavors"].replace([flavor("tas", tolerations=[{"key": "maintenance.example.com/drain", "operator": "Exists"}])])
    h["nodes"].apply("MODIFIED", gpu_node("h3", "b1", "r2"))
    h["workloads"].apply("ADDED", no_placement(waiting("big", 2, 8, {"required": RACK}), legacy=True))
    assert fit(expo, "big") == {"domain": 0, "cluster": 1}
    assert blocked(expo) == {("train-cq", "rack"): 1}


@pytest.mark.parametrize("legacy", [False, True], ids=["TopologyPlacementFailed", "legacy Pending"])
async def test_explain_names_placement_for_both_generations_of_the_reason(legacy: bool) -> None:
    """The legacy Pending with Kueue's placement message gets the typed reason's verdict: the
    placement layer blocks, Kueue's message first, gangscope's model beside it."""
    from exporter.explain import diagnose

    _, store, h = cluster()
    h["workloads"].apply("ADDED", no_placement(waiting("big", 2, 8, {"required": RACK}), legacy=legacy))
    doc = await diagnose(store, GANGS[id(store)], "team", "big")
    admission, placement = doc["layers"][0], doc["layers"][1]
    assert doc["verdict"]["layer"] == "placement"
    assert admission["status"] == "ok" and placement["status"] == "blocking"
    assert placement["summary"] == (
        'Kueue: no topology placement: couldn\'t assign flavors to pod set main: topology "default" doesn\'t allow to fit '
        'any of 2 pod(s). does not fit now in flavor tas: main: topology "default" doesn\'t allow to fit any of 2 pod(s). '
        # h1, h2: 4 GPUs free each, c1: none; h4: tainted for maintenance; h3 (cordoned), h5 (NotReady):
        # not in Kueue's snapshot
        'Total nodes: 4; excluded: resource "nvidia.com/gpu": 3, taint "maintenance.example.com/drain=true:NoExecute": 1')


def test_placeable_pods_count_the_nodes_pods_too() -> None:
    """A pod takes one of the node's allocatable pods as well as its GPUs (Kueue adds a pods unit to
    every request, tas_flavor_snapshot.go:896-899): h1 allows 2 pods, one admitted pod holds 2 GPUs."""
    expo, _, h = collector()
    h["topologies"].replace([topology()])
    small = gpu_node("h1", "b1", "r1")
    small["status"]["allocatable"]["pods"] = "2"
    h["nodes"].replace([small, gpu_node("h2", "b1", "r1")])
    h["workloads"].replace([workload("a", hosts=["h1"], gpus="2", conditions=admitted_conditions())])
    # h1: 6 GPUs free but room for one more pod; h2: 8 GPUs, 110 pods. A host exports the sizes
    # whose count is not free // size (what host:gangscope_domain_placeable_pods:sum records
    # otherwise): h1 its 1- and 2-GPU pods, h2 nothing.
    assert placeable(expo, "host", "b1", "r1", "h1") == {1: 1, 2: 1}
    assert placeable(expo, "host", "b1", "r1", "h2") == {}
    free = {"h1": 6, "h2": 8}
    recorded = {h: {size: placeable(expo, "host", "b1", "r1", h).get(size, free[h] // size) for size in (1, 2, 4, 8)}
                for h in free}
    assert recorded == {"h1": {1: 1, 2: 1, 4: 1, 8: 0}, "h2": {1: 8, 2: 4, 4: 2, 8: 1}}
    assert placeable(expo, "rack", "b1", "r1") == {1: 9, 2: 5, 4: 3, 8: 1}


def test_an_unknown_cluster_queue_gives_no_fit() -> None:
    expo, store, h = cluster()
    h["workloads"].apply("ADDED", waiting("small", 2, 4, {"required": RACK}))
    assert fit(expo, "small") == {"domain": 1, "cluster": 1}
    store.cluster_queues = {}
    h["workloads"].apply("MODIFIED", waiting("small", 3, 4, {"required": RACK}))
    assert fit(expo, "small") == {}
    # a queue whose flavors gangscope knows none of: no claim either
    store.cluster_queues = {"train-cq": parse_cluster_queue(cluster_queue("train-cq", ("other",)))}
    h["workloads"].apply("MODIFIED", waiting("small", 2, 4, {"required": RACK}))
    assert fit(expo, "small") == {}


async def test_kueue_is_never_contradicted_not_even_after_capacity_was_freed() -> None:
    """Live: Kueue found no rack at 10:00; a Workload on r1 is deleted after that. The model now
    places it, but Kueue's word stands (fit unknown, the difference said) exactly as explain's
    own LIST of the same objects would say: a live-only observation once made the two disagree."""
    from exporter.explain import placement_layer

    expo, store, h = cluster()
    store.start_timers()
    try:
        h["workloads"].apply("ADDED", no_placement(waiting("big", 2, 8, {"required": RACK})))
        store.capacity.flush()
        assert fit(expo, "big") == {"domain": 0, "cluster": 0}
        h["workloads"].apply("DELETED", workload("a"))  # frees r1, seen live after Kueue's attempt
        store.capacity.flush()
        assert fit(expo, "big") == {}
        live = placement_layer(store.workload("team", "big"), store.capacity.workload_fit(store.workload("team", "big")))
        assert live["summary"] == (
            "Kueue: no topology placement: couldn't assign flavors to pod set main: topology \"default\" doesn't allow "
            "to fit any of 2 pod(s). gangscope's model of Kueue's placement would place it now (flavor tas), but Kueue's "
            "last attempt (failing since 2026-12-01T10:00:00Z) found no placement. Kueue tries again as soon as capacity "
            "is freed, so if this lasts Kueue counts something gangscope does not see (pods outside gangscope's watch, "
            "for one); fit unknown")
        assert live["evidence"]["fit"]["kueue_disagrees"] is True
    finally:
        store.stop_timers()
    # the same objects, arrived all at once (a dump, or explain's own LIST): the same answer
    expo2, store2, h2 = cluster()
    h2["workloads"].apply("DELETED", workload("a"))
    h2["workloads"].apply("ADDED", no_placement(waiting("big", 2, 8, {"required": RACK})))
    store2.capacity.flush()
    assert fit(expo2, "big") == {}
    offline = placement_layer(store2.workload("team", "big"), store2.capacity.workload_fit(store2.workload("team", "big")))
    assert offline == live


def test_fit_honours_the_pod_sets_tolerations_and_node_selector() -> None:
    expo, _, h = cluster()
    tolerating = waiting("tolerating", 1, 8, {"required": RACK}, tolerations=[MAINTENANCE | {"operator": "Equal"}])
    h["workloads"].apply("ADDED", tolerating)
    h["workloads"].apply("ADDED", waiting("plain", 1, 8, {"required": RACK}))
    # h4 (tainted) is unavailable in the domain series, but this pod set tolerates its taint
    assert fit(expo, "tolerating") == {"domain": 1, "cluster": 1}
    assert fit(expo, "plain") == {"domain": 0, "cluster": 0}
    selective = waiting("selective", 1, 8, {"required": RACK}, tolerations=[MAINTENANCE | {"operator": "Equal"}])
    selective["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {"pool": "other"}
    h["workloads"].apply("ADDED", selective)
    assert fit(expo, "selective") == {"domain": 0, "cluster": 0}


def test_slices_must_each_fit_in_their_domain() -> None:
    """4 pods x 2 GPUs in one block, slices of 2 pods per rack: block b1 has room for four 2-GPU
    pods (r1: 3, r2: 1) but only one 2-pod slice (r1: 3 // 2, r2: 1 // 2)."""
    expo, _, h = collector()
    h["topologies"].replace([topology()])
    h["resourceflavors"].replace([flavor("tas")])
    h["localqueues"].replace([local_queue("q", "team", "train-cq")])
    h["nodes"].replace([gpu_node("h1", "b1", "r1"), gpu_node("h2", "b1", "r2")])
    h["workloads"].replace([workload("busy1", hosts=["h1"], gpus="2", conditions=admitted_conditions()),
                            workload("busy2", hosts=["h2"], gpus="6", conditions=admitted_conditions())])
    request = {"required": BLOCK, "podSetSliceRequiredTopology": RACK, "podSetSliceSize": 2}
    h["workloads"].apply("ADDED", waiting("sliced", 4, 2, request))
    h["workloads"].apply("ADDED", waiting("unsliced", 4, 2, {"required": BLOCK}))
    assert placeable(expo, "block", "b1")[2] == 4
    # as requested: Kueue's "allows to fit only 1 out of 2 slice(s)"; with the levels (and slices) dropped, 4 pods fit
    assert fit(expo, "sliced") == {"domain": 0, "cluster": 1}
    assert fit(expo, "unsliced") == {"domain": 1, "cluster": 1}
    lines = values(expo, "gangscope_workload_topology_request")
    assert {(dict(k)["workload"], dict(k)["mode"], dict(k)["level"]): v for k, v in lines.items()} == {
        ("sliced", "required", "block"): 1, ("sliced", "slice_required", "rack"): 2, ("unsliced", "required", "block"): 1,
    }


def test_placement_quality_of_a_preferred_request() -> None:
    """2 pods x 4 GPUs preferring one rack, placed in r1 and r2: spans 2 racks where 1 would do
    (one rack holds 16 GPUs, four such pods)."""
    expo, _, h = collector()
    h["topologies"].replace([topology()])
    h["nodes"].replace([gpu_node("h1", "b1", "r1"), gpu_node("h2", "b1", "r1"), gpu_node("h3", "b1", "r2")])
    h["workloads"].replace([workload("spread", hosts=["h1", "h3"], gpus="4", conditions=admitted_conditions(),
                                     topology={"preferred": RACK})])
    key = (("namespace", "team"), ("podset", "main"), ("workload", "spread"))
    spanned = values(expo, "gangscope_workload_domains_spanned")
    assert {dict(k)["level"]: v for k, v in spanned.items()} == {"block": 1, "rack": 2}
    ratio = values(expo, "gangscope_workload_locality_ratio")
    assert {dict(k)["level"]: v for k, v in ratio.items()} == {"block": 1, "rack": 0.5}
    assert values(expo, "gangscope_workload_domains_needed") == {tuple(sorted((*key, ("level", "rack")))): 1}
    # 6 pods of 4 GPUs: r1 holds 4, r2 2: two racks needed
    six = workload("six", hosts=["h1", "h2", "h3"], count=3, gpus="4", conditions=admitted_conditions(),
                   topology={"preferred": RACK})
    six["spec"]["podSets"][0]["count"] = 6
    six["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"][0]["podCounts"]["universal"] = 2
    h["workloads"].apply("ADDED", six)
    needed = {dict(k)["workload"]: v for k, v in values(expo, "gangscope_workload_domains_needed").items()}
    assert needed == {"spread": 1, "six": 2}


def test_sharded_collectors_export_what_adds_up() -> None:
    """Shard 0 exports the Nodes' side, every shard its own usage; what needs every Workload's
    usage (free, placeable, domain states, fit, fragmentation) only an unsharded collector."""
    expo, store, h = cluster()
    h["workloads"].apply("ADDED", waiting("big", 2, 8, {"required": RACK}))
    store.capacity.set_shards(1, 2)
    store.capacity.flush()
    assert gpus(expo, "rack", "b1", "r1") == {"used": 8}
    assert values(expo, "gangscope_domain_placeable_pods") == {}
    assert values(expo, "gangscope_domains") == {}
    assert values(expo, "gangscope_workload_fit") == {}
    store.capacity.set_shards(0, 2)
    store.capacity.flush()
    assert gpus(expo, "rack", "b1", "r1") == {"capacity": 16, "unavailable": 0, "used": 8}
    store.capacity.set_shards(0, 1)
    store.capacity.flush()
    assert gpus(expo, "rack", "b1", "r1") == {"capacity": 16, "unavailable": 0, "used": 8, "free": 8}
    assert fit(expo, "big") == {"domain": 0, "cluster": 0}
    assert domains(expo, "rack") == {"free": 0, "partial": 1, "full": 0, "unavailable": 2}


def bound(expo: Exposition, level: str) -> dict[str, float]:
    """``domain name -> bound GPUs`` of one level (``gangscope_domain_gpus_bound``)."""
    return {dict(k)[level]: v for k, v in values(expo, "gangscope_domain_gpus_bound").items() if ("level", level) in k}


def test_bound_gpus_are_the_schedulers_view() -> None:
    """``gangscope_domain_gpus_bound``: GPUs of the bound, non-terminal watched pods per domain,
    beside Kueue's ``used``. In cluster(), Kueue counts a's 1 x 4 GPUs on h1 and on h2 (r1: 8)
    and b's 8 on h5 (r3)."""
    from test_gang_evidence import pod

    expo, store, h = cluster()
    assert values(expo, "gangscope_domain_gpus_bound") == {}  # no pod source has listed: nothing known yet
    kueue = {"kueue.x-k8s.io/podset": "main"}
    h["pods_kueue"].replace([
        pod("a-0", "team", node="h1", gpus=4, labels=kueue),  # bound and running: 4 on h1
        pod("a-1", "team", node=None, gpus=4, phase="Pending", labels=kueue),  # Kueue counts it on h2, not bound yet
        pod("x", "team", node="h3", gpus=2, labels=kueue),  # on the cordoned h3: bound, outside Kueue's usage
        pod("b-0", "team", node="h5", gpus=8, phase="Failed", labels=kueue),  # finished: holds nothing
        pod("y", "team", node="gone", gpus=8, labels=kueue),  # a node that is not a known GPU host: in no domain
    ])
    # r1 = h1 4 + h2 0; r2 = h3 2; r3 = h4 0 + h5 0; b1 = 6, b2 = 0
    assert bound(expo, "host") == {"h1": 4, "h2": 0, "h3": 2, "h4": 0, "h5": 0}
    assert bound(expo, "rack") == {"r1": 4, "r2": 2, "r3": 0}
    assert bound(expo, "block") == {"b1": 6, "b2": 0}
    assert gpus(expo, "rack", "b1", "r1")["used"] == 8  # Kueue's view: 4 more than bound
    # a-1 is bound to h2: the views agree on r1; x goes: r2 back to 0
    h["pods_kueue"].apply("MODIFIED", pod("a-1", "team", node="h2", gpus=4, labels=kueue, rv="2"))
    h["pods_kueue"].apply("DELETED", pod("x", "team", node="h3", gpus=2, labels=kueue, rv="3"))
    assert bound(expo, "rack") == {"r1": 8, "r2": 0, "r3": 0}
    assert bound(expo, "block") == {"b1": 8, "b2": 0}
    # without pod watches (--no-pods) the family is not exported
    expo2, _, h2 = collector(watch_pods=False)
    h2["topologies"].replace([topology()])
    h2["nodes"].replace([gpu_node("h1", "b1", "r1")])
    assert "pods_kueue" not in h2 and values(expo2, "gangscope_domain_gpus_bound") == {}
    assert gpus(expo2, "rack", "b1", "r1")["capacity"] == 8


def test_a_dump_with_pods_gives_bound_gpus() -> None:
    """``snapshot`` of ``kubectl get nodes,pods,...``: the dump's pods are the complete list."""
    from exporter import loader
    from test_gang_evidence import pod

    e = Exposition()
    _, handlers, _ = build_collector(e)
    objs = [topology(), gpu_node("h1", "b1", "r1"), gpu_node("h2", "b1", "r1"),
            pod("p0", "team", node="h1", gpus=8), pod("p1", "team", node="h2", gpus=2, phase="Pending", ready=False)]
    loader.feed(e, handlers, [("dump", o) for o in objs], "snapshot")
    # a pod bound and still starting holds its GPUs: r1 = 8 + 2
    assert bound(e, "host") == {"h1": 8, "h2": 2} and bound(e, "rack") == {"r1": 10}


class RecordingExposition(Exposition):
    """Records the owners each change renders."""

    def __init__(self) -> None:
        super().__init__()
        self.touched: list[Any] = []

    def set(self, owner: Any, lines: Any) -> None:
        self.touched.append(owner)
        super().set(owner, lines)


def test_an_event_renders_only_the_domains_it_changes() -> None:
    expo = RecordingExposition()
    _, h, _ = build_collector(expo)
    h["topologies"].replace([topology()])
    h["nodes"].replace([gpu_node(f"n{i}", f"b{i // 8}", f"r{i // 4}") for i in range(32)])
    h["workloads"].replace([workload(f"w{i}", hosts=[f"n{2 * i}", f"n{2 * i + 1}"], conditions=admitted_conditions())
                            for i in range(16)])
    expo.touched.clear()
    h["workloads"].apply("MODIFIED", workload("w0", hosts=["n0", "n1"], conditions=admitted_conditions(ready=False)))
    assert [o for o in expo.touched if o[0] == "capacity_domain"] == []  # usage unchanged: nothing to redo
    h["workloads"].apply("DELETED", workload("w0"))
    domains_touched = sorted(o[1:] for o in expo.touched if o[0] == "capacity_domain")
    # n0 and n1: their two hosts, rack r0, block b0; nothing else of the 32 hosts, 8 racks, 4 blocks
    assert [(level, path[-1][1]) for level, path in domains_touched] == [(0, "b0"), (1, "r0"), (2, "n0"), (2, "n1")]


async def test_the_collector_flushes_on_a_timer_never_on_a_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capacity_module, "FLUSH_DELAY", 0.2)
    expo, store, h = cluster()
    store.start_timers()
    try:
        h["nodes"].apply("MODIFIED", gpu_node("h3", "b1", "r2"))
        assert gpus(expo, "rack", "b1", "r2")["free"] == 0  # not yet: a scrape now sees the last flush
        await asyncio.sleep(0.4)
        assert gpus(expo, "rack", "b1", "r2")["free"] == 8
    finally:
        store.stop_timers()


def test_explain_gives_the_numeric_verdict() -> None:
    from exporter.explain import placement_layer

    _, store, h = cluster()
    h["resourceflavors"].replace([flavor("tas", tolerations=[{"key": "maintenance.example.com/drain", "operator": "Exists"}])])
    h["nodes"].apply("MODIFIED", gpu_node("h3", "b1", "r2"))
    h["workloads"].apply("ADDED", waiting("big", 2, 8, {"required": RACK}))
    report = store.capacity.workload_fit(store.workload("team", "big"))
    # free: r1 8 (4 on h1, 4 on h2: no 8-GPU pod), r2 (h3: one), r3 (h4: one; c1 has no GPU; h5
    # NotReady is not in Kueue's snapshot): at most one per rack, Kueue's message for the same cluster
    assert report.text == ('no single domain fits (main: topology "default" allows to fit only 1 out of 2 pod(s). Total '
                           'nodes: 5; excluded: resource "nvidia.com/gpu": 3), but the flavor tas would hold it with the '
                           'level dropped: fragmented')
    assert report.evidence["podsets"] == [{"podset": "main", "levels": [], "domains": [], "reason": report.verdict.placements[0][1].reason}]
    h["workloads"].apply("ADDED", waiting("huge", 4, 8, {"preferred": BLOCK}))
    report = store.capacity.workload_fit(store.workload("team", "huge"))
    assert report.text == ('does not fit now in flavor tas: main: topology "default" allows to fit only 2 out of 4 pod(s). '
                           'Total nodes: 5; excluded: resource "nvidia.com/gpu": 3')
    h["workloads"].apply("ADDED", waiting("two", 2, 8, {"preferred": BLOCK}))
    report = store.capacity.workload_fit(store.workload("team", "two"))
    assert report.text == "gangscope's model places it now in flavor tas: main 2 pods on 2 hostnames"
    assert report.evidence["podsets"][0]["domains"] == [{"values": ["h3"], "pods": 1}, {"values": ["h4"], "pods": 1}]
    assert placement_layer(store.workload("team", "two"), report)["evidence"]["fit"]["fits_as_requested"] is True


def test_parse_sizes() -> None:
    assert parse_sizes("8,1, 4,2,8") == (1, 2, 4, 8)
    for bad in ("", "0", "2,x", "-1"):
        with pytest.raises(ValueError):
            parse_sizes(bad)


def test_nodes_built_from_the_core_v1_types() -> None:
    """tests/fixtures/nodes/gpu-nodes.yaml (see its header): what the record keeps of each."""
    nodes = {n.name: n for n in (parse_node(obj) for _, obj in load_path(NODES).objects)}
    ready = nodes["gke-ml-a3mega-pool-1-5d2f7a1c-35l9"]
    assert (ready.gpus, ready.gpu_node, ready.ready, ready.unschedulable) == (8, True, True, False)
    assert ready.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),) and not ready.problems
    cordoned = nodes["gke-ml-a3mega-pool-1-5d2f7a1c-avsy"]
    assert cordoned.unschedulable and cordoned.ready
    unreachable = nodes["gke-ml-a3mega-pool-1-5d2f7a1c-h7qd"]
    assert not unreachable.ready and [t.effect for t in unreachable.taints] == ["NoSchedule", "NoSchedule", "NoExecute"]
    gb200 = nodes["ip-10-1-44-17.us-west-2.compute.internal"]
    assert (gb200.gpus, gb200.taints) == (4, (Taint("maintenance.example.com/drain", "true", "NoExecute"),))
    assert not nodes["gke-ml-system-pool-3a1e9c70-x2kq"].gpu_node


def test_tolerations_follow_core_v1() -> None:
    taint = Taint("k", "5", "NoSchedule")
    assert Toleration("k", "Equal", "5", "NoSchedule").tolerates(taint)
    assert Toleration("k", "", "5", "").tolerates(taint)  # empty operator is Equal, empty effect matches all
    assert not Toleration("k", "Equal", "6", "").tolerates(taint)
    assert Toleration("", "Exists", "", "").tolerates(taint)  # empty key with Exists tolerates everything
    assert not Toleration("k", "Exists", "", "NoExecute").tolerates(taint)
    assert Toleration("k", "Gt", "4", "").tolerates(taint) and not Toleration("k", "Gt", "5", "").tolerates(taint)
    assert Toleration("k", "Lt", "6", "").tolerates(taint) and not Toleration("k", "Lt", "x", "").tolerates(taint)
    assert not Toleration("k", "Sometimes", "5", "").tolerates(taint)


def test_a_dump_gives_the_same_series(tmp_path: Path, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    """``gangscope snapshot`` on ``kubectl get nodes,topologies,resourceflavors,workloads -o yaml``:
    the GKE four-level Topology over the Node fixtures and the admitted 16 x 8-GPU Workload, whose
    hosts 35l9 and avsy are in the dump (1 pod x 8 GPUs each)."""
    gke = ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
           "cloud.google.com/gce-topology-host", HOST)
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "nodes.yaml").write_text(NODES.read_text())
    (dump / "kueue.yaml").write_text(yaml.safe_dump_all([topology("gke", gke), *fixture("workload-v1beta2-admitted-tas.yaml")]))
    parser = argparse.ArgumentParser()
    snapshot.add_arguments(parser)
    assert snapshot.run(parser.parse_args(["--from-file", str(dump)])) == 0
    s = series(capfdbinary.readouterr().out.decode())
    got = {(dict(k)["level"], dict(k).get("subblock", ""), dict(k).get("host", ""), dict(k)["state"]): v
           for (name, k), v in s.items() if name == "gangscope_domain_gpus"}
    block = "0b2a5c9e61f1e0d7"
    # block: 35l9 (8, used 8), avsy (cordoned, used 8), h7qd (unreachable): capacity 24, unavailable 16, used 16
    assert {k[3]: v for k, v in got.items() if k[0] == "block"} == {"capacity": 24, "unavailable": 16, "used": 16, "free": 0}
    assert {(k[1], k[3]): v for k, v in got.items() if k[0] == "subblock"} == {
        ("4c8e0d1b", "capacity"): 16, ("4c8e0d1b", "unavailable"): 8, ("4c8e0d1b", "used"): 16, ("4c8e0d1b", "free"): 0,
        ("9a7b3c2d", "capacity"): 8, ("9a7b3c2d", "unavailable"): 8, ("9a7b3c2d", "used"): 0, ("9a7b3c2d", "free"): 0}
    # the GB200 node has no GKE labels: only a host-level domain, unavailable under its NoExecute taint
    gb200 = {k[3]: v for k, v in got.items() if k[2] == "ip-10-1-44-17.us-west-2.compute.internal"}
    assert gb200 == {"capacity": 4, "unavailable": 4, "used": 0}
    states = {(dict(k)["level"], dict(k)["state"]): v for (name, k), v in s.items() if name == "gangscope_domains"}
    assert states[("block", "full")] == 1 and states[("host", "unavailable")] == 3 and states[("host", "full")] == 1
    assert block in {dict(k).get("block") for (name, k) in s if name == "gangscope_domain_gpus"}
    assert s[("gangscope_workload_past_execution_seconds", frozenset({("namespace", "ml-team"),
                                                                      ("workload", "job-llama-train-f48ba")}))] == 2052


def test_bad_node_fields_are_counted_not_fatal() -> None:
    expo, store, h = collector()
    bad = gpu_node("h1", "b1", "r1", gpus="eight")
    bad["spec"]["taints"] = [{"key": "x"}, "not a taint"]
    h["nodes"].replace([bad, gpu_node("h2", "b1", "r1")])
    parse_errors = series(expo.render(False).decode())[("gangscope_parse_errors_total", frozenset({("source", "nodes")}))]
    assert parse_errors == 3  # the quantity, the taint without an effect, the taint that is no object
    assert store.nodes["h1"].gpus == 0 and store.capacity.hosts["h2"].gpus == 8


def test_workload_fit_needs_a_request_and_gpus() -> None:
    expo, _, h = cluster()
    h["workloads"].apply("ADDED", waiting("untas", 1, 8, {"podIndexLabel": "batch.kubernetes.io/job-completion-index"}))
    h["workloads"].apply("ADDED", waiting("cpu", 1, 0, {"required": RACK}))
    h["workloads"].apply("ADDED", waiting("anywhere", 2, 4, {"unconstrained": True}))
    # a request naming no level gets no fit; a CPU-only pod set is placed like any other
    # (Kueue counts every resource, and one pod: h1 and h2 have room for it)
    assert fit(expo, "untas") == {} and fit(expo, "cpu") == {"domain": 1, "cluster": 1}
    assert fit(expo, "anywhere") == {"domain": 1, "cluster": 1}


def test_incremental_numbers_equal_a_fresh_count() -> None:
    """After each random change (workloads moved, admitted, finished; nodes cordoned, tainted,
    relabelled), the live store's capacity series equal those of a store fed the same objects from
    scratch: the incremental updates lose nothing."""
    import random

    rng = random.Random(16)
    names = [f"n{i}" for i in range(24)]

    def node(i: int, state: dict[str, Any]) -> dict[str, Any]:
        rack = state.get(("rack", i), f"r{i // 4}")
        return gpu_node(names[i], f"b{i // 12}", rack, unschedulable=state.get(("cordon", i), False),
                        taints=[MAINTENANCE] if state.get(("taint", i)) else None)

    state: dict[Any, Any] = {}
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    expo, _, h = collector()
    h["topologies"].replace([topology()])
    h["resourceflavors"].replace([flavor("tas")])
    h["localqueues"].replace([local_queue("q", "team", "cq")])
    for i in range(len(names)):
        objects[("node", names[i])] = node(i, state)
        h["nodes"].apply("ADDED", objects[("node", names[i])])
    for step in range(120):
        kind = rng.choice(["move", "move", "wait", "finish", "cordon", "taint", "relabel"])
        w = f"w{rng.randrange(8)}"
        if kind == "move":
            obj = workload(w, hosts=rng.sample(names, rng.randint(1, 4)), gpus=str(rng.choice([1, 2, 4, 8])),
                           conditions=admitted_conditions())
        elif kind == "wait":
            obj = waiting(w, rng.randint(1, 6), rng.choice([2, 4, 8]), rng.choice([{"required": RACK}, {"preferred": BLOCK},
                                                                                   {"required": BLOCK}]))
        elif kind == "finish":
            obj = workload(w, hosts=["n0"], conditions=[*admitted_conditions(), cond("Finished", "True", "Succeeded")])
        else:
            i = rng.randrange(len(names))
            key = {"cordon": ("cordon", i), "taint": ("taint", i), "relabel": ("rack", i)}[kind]
            state[key] = f"r{rng.randrange(8)}" if kind == "relabel" else not state.get(key, False)
            obj = node(i, state)
        objects[(obj["kind"].lower(), obj["metadata"]["name"])] = obj
        h["nodes" if obj["kind"] == "Node" else "workloads"].apply("MODIFIED", obj)
        if step % 10 == 9:
            fresh, _, fh = collector()
            fh["topologies"].replace([topology()])
            fh["resourceflavors"].replace([flavor("tas")])
            fh["localqueues"].replace([local_queue("q", "team", "cq")])
            fh["nodes"].replace([o for (k, _), o in objects.items() if k == "node"])
            fh["workloads"].replace([o for (k, _), o in objects.items() if k == "workload"])
            for family in ("gangscope_domain_gpus", "gangscope_domain_placeable_pods", "gangscope_domains",
                           "gangscope_workload_fit", "gangscope_fragmentation_blocked_workloads"):
                assert values(expo, family) == values(fresh, family), (step, family)


async def test_live_collector_serves_what_a_snapshot_of_the_same_objects_says(kube_sim: Any, kube_sim_kubeconfig: str) -> None:
    """The real collector against the simulated API server over HTTP: its capacity series equal
    a snapshot's of the server's objects, and follow a cordon within the flush delay."""
    import aiohttp

    from collectors import started_collector
    from exporter import loader
    from exporter.kube.resources import LOCAL_QUEUES, NODES as NODE_RESOURCE, RESOURCE_FLAVORS, TOPOLOGIES, WORKLOADS

    served = (WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, RESOURCE_FLAVORS, NODE_RESOURCE)
    for r in served:
        kube_sim.serve(r)
    for obj in (topology(), flavor("tas"), local_queue("q", "team", "train-cq"), gpu_node("h1", "b1", "r1"),
                gpu_node("h2", "b1", "r1"), gpu_node("h3", "b1", "r2"),
                workload("a", hosts=["h1", "h2"], gpus="4", conditions=admitted_conditions()),
                waiting("big", 2, 8, {"required": RACK})):
        kube_sim.create(obj)

    def snapshot() -> dict[str, dict]:
        e = Exposition()
        snap_store, handlers, _ = build_collector(e)
        snap_store.cluster_queues = dict(QUEUES)
        loader.feed(e, handlers, [("sim", o) for r in served for o in kube_sim.objects(r)], "snapshot")
        return {f: values(e, f) for f in ("gangscope_domain_gpus", "gangscope_domain_placeable_pods", "gangscope_domains",
                                          "gangscope_workload_fit", "gangscope_fragmentation_blocked_workloads")}

    async def served_now(port: int) -> dict[str, dict]:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as resp:
            text = await resp.text()
        got = series(text)
        return {f: {tuple(sorted(k[1])): v for k, v in got.items() if k[0] == f} for f in snapshot()}

    async def converged(port: int, want: dict[str, dict]) -> dict[str, dict]:
        for _ in range(60):
            got = await served_now(port)
            if got == want:
                return got
            await asyncio.sleep(0.1)
        return got

    collector = await started_collector(kube_sim_kubeconfig)
    collector.store.cluster_queues = dict(QUEUES)
    try:
        want = snapshot()
        # big needs two 8-GPU pods in one rack: r1's 8 free GPUs are 4 on h1 and 4 on h2 (no such pod),
        # r2 (h3) takes one: no rack holds it, nor the cluster (1 of 2)
        assert want["gangscope_workload_fit"] == {(("namespace", "team"), ("scope", "cluster"), ("workload", "big")): 0,
                                                  (("namespace", "team"), ("scope", "domain"), ("workload", "big")): 0}
        assert await converged(collector.port, want) == want
        kube_sim.update(gpu_node("h3", "b1", "r2", unschedulable=True))
        want = snapshot()
        assert gpus_of(want, "rack", "r2") == {"capacity": 8, "unavailable": 8, "used": 0, "free": 0}
        assert await converged(collector.port, want) == want
    finally:
        await collector.stop()


def gpus_of(families: dict[str, dict], level: str, name: str) -> dict[str, float]:
    return {dict(k)["state"]: v for k, v in families["gangscope_domain_gpus"].items()
            if ("level", level) in k and (level, name) in k}
