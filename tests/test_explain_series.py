"""explain says what the series say: on the same objects, every Workload's explain document and
the collector's series render one judgement each.

For every Workload of a corpus (the demo's cluster at three points of its timeline; the real
objects of tests/fixtures/kueue/real and ../shared/fixtures/real), explain's

* stage is the one ``gangscope_workload_stage`` carries;
* gangs' stages are the ones ``gangscope_gang_stage`` carries;
* fit is ``gangscope_workload_fit`` (absent where explain says unknown);
* verdict layer is the one :func:`exporter.cluster.holding.holding_layer` decides from those
  values, and no layer's own text had to be overruled (``explain_layer_disagrees``).

A layer that re-judged what the store decided (a ``recovering`` Workload shown ``running``, pods
held by Kueue's topology gate shown "placement ok") fails here on the objects where it happens.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import shared_folder
from exporter import explain, loader
from exporter.cluster.holding import holding_layer
from exporter.sim.scenario import build_default
from kueue_objects import FIXTURES

NOW = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
LABELS = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _demo_at(seconds: float) -> list[tuple[str, dict[str, Any]]]:
    """The demo's objects with its timeline applied up to ``seconds`` after the start."""
    sc = build_default(NOW)
    objs = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in sc.all_objects()}
    for t, event, obj in sorted(sc.timeline, key=lambda e: e[0]):
        if t <= seconds:
            key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if event == "DELETED":
                objs.pop(key, None)
            else:
                objs[key] = obj
    return [("demo", o) for o in objs.values()]


def _files(path: Path | None) -> list[tuple[str, dict[str, Any]]]:
    if path is None:
        pytest.skip("../shared/fixtures/real is missing (tests/shared_folder.py)")
    return loader.load_path(path).objects


CORPORA = {
    "demo-start": lambda: _demo_at(0),
    "demo-node-failed": lambda: _demo_at(20),
    "demo-late": lambda: _demo_at(60),
    "kueue-real": lambda: _files(FIXTURES / "real"),
    "shared-real": lambda: _files(shared_folder.present("fixtures", "real")),
}


def _series(store: Any) -> dict[str, dict[tuple[str, ...], dict[str, str]]]:
    """family -> identifying labels -> all labels, of the rendered exposition."""
    out: dict[str, dict[tuple[str, ...], dict[str, str]]] = {}
    for line in store.exposition.render(False).decode().splitlines():
        if not line or line.startswith("#") or "{" not in line:
            continue
        name, rest = line.split("{", 1)
        labels = dict(LABELS.findall(rest.rsplit("}", 1)[0]))
        value = rest.rsplit(" ", 1)[1]
        out.setdefault(name, {})[tuple(sorted(labels.items()))] = labels | {"__value__": value}
    return out


def _one(series: dict[str, Any], family: str, **match: str) -> list[dict[str, str]]:
    return [s for s in series.get(family, {}).values() if all(s.get(k) == v for k, v in match.items())]


def _load(objects: list[tuple[str, dict[str, Any]]]) -> tuple[Any, Any]:
    p = argparse.ArgumentParser()
    explain.add_arguments(p)
    store, gangs, handlers = explain._build(p.parse_args(["x/y", "--from-file", "dump.yaml"]))
    loader.feed(store.exposition, handlers, objects, "test", quiet=True)
    return store, gangs


@pytest.mark.parametrize("corpus", list(CORPORA))
def test_explain_renders_the_series_judgements(corpus: str) -> None:
    store, gangs = _load(CORPORA[corpus]())
    series = _series(store)
    workloads = list(store.workloads.values())
    assert workloads, "the corpus has Workloads"
    checked: dict[str, int] = {}
    for wl in workloads:
        with capture_logs() as logs:
            doc = asyncio.run(explain.diagnose(store, gangs, wl.namespace, wl.name, now=store.clock()))
        where = f"{corpus}: {wl.namespace}/{wl.name}"
        assert not [e for e in logs if e["event"] == "explain_layer_disagrees"], (where, logs)
        stage = _one(series, "gangscope_workload_stage", namespace=wl.namespace, workload=wl.name)
        assert [s["stage"] for s in stage] == [doc["workload"]["stage"]], where
        _, _, wl_gangs = explain.resolve(store, gangs, wl.namespace, wl.name)
        for g in wl_gangs:
            exported = _one(series, "gangscope_gang_stage", namespace=g.podgroup.namespace, podgroup=g.podgroup.name)
            if exported:  # none once its Workload finished
                assert [s["stage"] for s in exported] == [g.stage], where
        fit_series = {s["scope"]: s["__value__"] for s in _one(series, "gangscope_workload_fit",
                                                                namespace=wl.namespace, workload=wl.name)}
        placement = next(layer for layer in doc["layers"] if layer["name"] == "placement")
        fit = placement["evidence"].get("fit") if placement["status"] != "not_reached" else None
        if fit is not None:
            want = {} if not fit["known"] else {"domain": str(int(fit["fits_as_requested"])),
                                                "cluster": str(int(fit["fits_with_levels_dropped"]))}
            assert fit_series == want, where
        holding = holding_layer(wl, [g.stage for g in wl_gangs], bool(explain.topology_gated(wl, wl_gangs, gangs)))
        layer = doc["verdict"]["layer"]
        if holding is not None:
            assert layer == holding, (where, doc["verdict"])
        else:
            assert layer not in explain.CLUSTER_LAYERS, (where, doc["verdict"])
        checked[holding or "none"] = checked.get(holding or "none", 0) + 1
    if corpus.startswith("demo"):
        # the demo holds jobs at each layer: the comparison is not vacuous
        assert {"admission", "assembly", "none"} <= set(checked), checked
        if corpus == "demo-node-failed":
            assert "placement" in checked, checked


def _admitted(name: str, **status: Any) -> dict[str, Any]:
    wl = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "creationTimestamp": "2026-12-07T07:00:00Z"},
        "spec": {"queueName": "lq", "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
        "status": {
            "admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "flavors": {"nvidia.com/gpu": "tas"},
                                                                       "count": 2, "resourceUsage": {"nvidia.com/gpu": "16"}}]},
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue cq",
                 "lastTransitionTime": "2026-12-07T07:00:05Z"},
                {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted",
                 "lastTransitionTime": "2026-12-07T07:00:05Z"},
            ],
        },
    }
    wl["status"]["conditions"] += status.pop("conditions", [])
    wl["status"].update(status)
    return wl


def _pod(name: str, wl: str, *, ready: bool, waiting: str = "", gated: bool = False) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}", "creationTimestamp": "2026-12-07T07:00:06Z",
                     "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                     "annotations": {"kueue.x-k8s.io/workload": wl}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Pending"},
    }
    if gated:
        pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/topology"}]
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
        return pod
    pod["spec"]["nodeName"] = f"node-{name}"
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                     "containerStatuses": [{"name": "c", "ready": ready, "restartCount": 0 if ready else 4,
                                            "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}}}]}
    return pod


def _explain(objs: list[dict[str, Any]], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    store, gangs = _load([("test", o) for o in objs])
    doc = asyncio.run(explain.diagnose(store, gangs, "team", name, now=store.clock()))
    return doc, _series(store)


def test_a_recovering_workload_is_held_at_assembly_and_names_the_crash_looping_pod() -> None:
    """Kueue writes PodsReady=False WaitForRecovery when a pod fails after the start (kueue
    pkg/controller/jobframework/reconciler.go 1905-1922): the series say recovering, so does explain."""
    recovering = _admitted("train", conditions=[
        {"type": "PodsReady", "status": "False", "reason": "WaitForRecovery",
         "message": "At least one pod has failed, waiting for recovery", "lastTransitionTime": "2026-12-07T07:30:00Z"}])
    doc, series = _explain([recovering, _pod("train-0", "train", ready=True),
                            _pod("train-1", "train", ready=False, waiting="CrashLoopBackOff")], "train")
    assert [s["stage"] for s in _one(series, "gangscope_workload_stage", workload="train")] == ["recovering"]
    assert doc["workload"]["stage"] == "recovering"
    assert doc["verdict"]["status"] == "held" and doc["verdict"]["layer"] == "assembly", doc["verdict"]
    assembly = next(layer for layer in doc["layers"] if layer["name"] == "assembly")
    assert "train-1 (CrashLoopBackOff on node-train-1)" in assembly["summary"], assembly["summary"]
    assert "WaitForRecovery" in assembly["summary"]
    assert [p["pod"] for p in assembly["evidence"]["not_ready_pods"]] == ["train-1"]


def test_pods_held_by_kueues_topology_gate_are_held_at_placement() -> None:
    """Kueue's TAS ungater lifts kueue.x-k8s.io/topology only once each pod has its domain
    (kueue pkg/controller/tas/topology_ungater.go): the layer that holds them is placement, and
    assembly is not reached."""
    admitted = _admitted("gated", conditions=[
        {"type": "PodsReady", "status": "False", "reason": "WaitForStart", "message": "Not all pods are ready or succeeded",
         "lastTransitionTime": "2026-12-07T07:00:05Z"}])
    doc, _ = _explain([admitted, _pod("gated-0", "gated", ready=False, gated=True),
                       _pod("gated-1", "gated", ready=False, gated=True)], "gated")
    assert doc["verdict"]["layer"] == "placement", doc["verdict"]
    placement = next(layer for layer in doc["layers"] if layer["name"] == "placement")
    assert placement["status"] == "blocking" and "kueue.x-k8s.io/topology" in placement["summary"]
    assert placement["evidence"]["topology_gated"] == ["pod gated-0", "pod gated-1"]
    assert next(layer for layer in doc["layers"] if layer["name"] == "assembly")["status"] == "not_reached"


@pytest.mark.parametrize(("missing", "target", "layer", "says"), [
    ((), "ml-team/llama-70b-sft", "placement", "no single domain fits"),
    (("ClusterQueue",), "ml-team/llama-70b-sft", "placement", "fit unknown: its ClusterQueue is not known"),
    (("Node",), "ml-team/llama-70b-sft", "placement", "fit unknown: no Node is known (a dump without Nodes, or Nodes not readable)"),
    (("Topology", "ResourceFlavor"), "ml-team/llama-70b-sft", "placement", "fit unknown: no TAS flavor of its ClusterQueue is known"),
    (("PodGroup",), "ml-team/llama-train", "assembly", "which gangscope does not see (deleted, or not watched)"),
])
def test_a_dump_without_a_kind_says_what_it_cannot_answer(missing: tuple[str, ...], target: str, layer: str, says: str) -> None:
    """The README's offline table: each kind a dump lacks turns the answers that need it into
    "unknown" with the reason, never into a confident verdict (a dump without Nodes once said
    "does not fit": no domain at the level)."""
    objs = [("demo", o) for _, o in _demo_at(0) if o["kind"] not in missing]
    store, gangs = _load(objs)
    namespace, name = target.split("/")
    doc = asyncio.run(explain.diagnose(store, gangs, namespace, name, now=store.clock()))
    summary = next(x for x in doc["layers"] if x["name"] == layer)["summary"]
    assert says in summary, summary


def test_a_dump_without_the_jobset_says_its_owner_is_not_known() -> None:
    objs = [("demo", o) for _, o in _demo_at(0) if o["kind"] != "JobSet"]
    store, gangs = _load(objs)
    wl = next(w for w in store.workloads.values() if w.owner is not None and w.owner.kind == "JobSet" and w.stage == "running")
    doc = asyncio.run(explain.diagnose(store, gangs, wl.namespace, wl.name, now=store.clock()))
    job = next(x for x in doc["layers"] if x["name"] == "job")
    assert (job["status"], job["summary"]) == ("unknown", f"its JobSet {wl.owner.name} is not known (not in the dump, or not watched)")


def _gpu_nodes() -> dict[str, dict[str, Any]]:
    """tests/fixtures/nodes/gpu-nodes.yaml by name: h7qd is Ready=Unknown NodeStatusUnknown with the
    node lifecycle controller's unreachable taints, 35l9 Ready."""
    return {o["metadata"]["name"]: o for _, o in loader.load_path(Path(__file__).parent / "fixtures" / "nodes" / "gpu-nodes.yaml").objects}


def _on(pod: dict[str, Any], node: str) -> dict[str, Any]:
    pod["spec"]["nodeName"] = node
    return pod


LOST, FINE = "gke-ml-a3mega-pool-1-5d2f7a1c-h7qd", "gke-ml-a3mega-pool-1-5d2f7a1c-35l9"


def test_a_running_gang_with_a_member_on_a_lost_node_is_a_hardware_verdict() -> None:
    """Without Kueue's unhealthyNodes (no TAS failure handling) nothing but the Node says a rank
    went: explain names the node, its domains and the pod there, offline and without Prometheus,
    where it said "running, every layer healthy" before."""
    nodes = _gpu_nodes()
    running = _admitted("train", conditions=[
        {"type": "PodsReady", "status": "True", "reason": "Started", "message": "All pods reached readiness",
         "lastTransitionTime": "2026-12-07T07:05:00Z"}])
    topology = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "gce"},
                "spec": {"levels": [{"nodeLabel": "cloud.google.com/gce-topology-block"},
                                    {"nodeLabel": "cloud.google.com/gce-topology-subblock"},
                                    {"nodeLabel": "kubernetes.io/hostname"}]}}
    doc, series = _explain([running, topology, nodes[LOST], nodes[FINE], _on(_pod("train-0", "train", ready=True), FINE),
                            _on(_pod("train-1", "train", ready=True), LOST)], "train")
    assert [s["stage"] for s in _one(series, "gangscope_workload_stage", workload="train")] == ["running"]
    assert doc["verdict"]["status"] == "held" and doc["verdict"]["layer"] == "interconnect", doc["verdict"]
    layer = next(x for x in doc["layers"] if x["name"] == "interconnect")
    assert layer["evidence"]["problem"] == "node_lost"
    [lost] = layer["evidence"]["lost_nodes"]
    assert (lost["node"], lost["why"], lost["pods"]) == (LOST, "unreachable", ["train-1"])
    assert layer["summary"].startswith(f"node {LOST} (") and "is unreachable, with pod train-1: hardware" in layer["summary"]
    assert list(lost["path"].values()) == ["0b2a5c9e61f1e0d7", "9a7b3c2d", LOST], lost["path"]


def test_a_gang_on_ready_nodes_or_unread_node_status_is_not_called_lost() -> None:
    """Positive controls: every member on a Ready node; and a Node read as metadata only (no
    status, as explain's label-selector list returns it) is not judged."""
    nodes = _gpu_nodes()
    running = _admitted("train")
    doc, _ = _explain([running, nodes[FINE], _on(_pod("train-0", "train", ready=True), FINE),
                       _on(_pod("train-1", "train", ready=True), FINE)], "train")
    assert doc["verdict"]["status"] == "running", doc["verdict"]
    bare = {"apiVersion": "v1", "kind": "Node", "metadata": nodes[LOST]["metadata"]}
    doc, _ = _explain([running, bare, _on(_pod("train-0", "train", ready=True), LOST),
                       _on(_pod("train-1", "train", ready=True), LOST)], "train")
    assert doc["verdict"]["status"] == "running", doc["verdict"]
    assert next(x for x in doc["layers"] if x["name"] == "interconnect")["evidence"].get("problem") is None


def test_node_not_ready_series_is_the_judgements_word_and_goes_when_ready() -> None:
    """gangscope_node_not_ready: one series per GPU node not Ready (the GangscopeWorkloadNodeLost
    rule's input), its why the one explain prints; none for a cordoned or CPU node."""
    nodes = _gpu_nodes()
    p = argparse.ArgumentParser()
    explain.add_arguments(p)
    store, _, handlers = explain._build(p.parse_args(["x/y", "--from-file", "dump.yaml"]))
    loader.feed(store.exposition, handlers, [("test", o) for o in nodes.values()], "test", quiet=True)
    got = {s["node"]: s["why"] for s in _series(store).get("gangscope_node_not_ready", {}).values()}
    assert got == {LOST: "unreachable"}
    back = copy.deepcopy(nodes[LOST])
    back["spec"]["taints"] = [t for t in back["spec"]["taints"] if not t["key"].startswith("node.kubernetes.io/")]
    for c in back["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="True", reason="KubeletReady", message="kubelet is posting ready status")
    loader.feed(store.exposition, handlers, [("test", back)], "test", quiet=True)
    assert "gangscope_node_not_ready" not in _series(store)
