"""A real Kueue decides, gangscope must agree: the fit of a waiting Workload against the upstream
Kueue controller manager (``../shared/tools/kueue``, v0.19.2) on the suite's real kube-apiserver.

One apiserver, one Kueue, one scenario per ClusterQueue: each scenario's Nodes carry its own label,
which its ResourceFlavor(s) select, so scenarios cannot see each other's capacity. The
ClusterQueues start held (``stopPolicy: Hold``); gangscope's collector, watching the same
apiserver, computes every Workload's fit first; then the queues are released, Kueue admits or
rejects each Workload, and gangscope's ``domain`` verdict must equal Kueue's decision. The
collector reads the ClusterQueues (their flavors in order) through its own watch.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

import realapi
import shared_folder
from collectors import started_collector
from exporter.cluster.workloads import parse_workload
from realapi import RealCluster

KUEUE = shared_folder.root() / "tools" / "kueue"
BLOCK, RACK, HOST = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
SCENARIO_LABEL = "gangscope.test/scenario"
GPU = "nvidia.com/gpu"
ALLOCATABLE = {"cpu": "8", "memory": "64Gi", "pods": "110", GPU: "8"}

pytestmark = pytest.mark.realapi


@pytest.fixture(scope="module", autouse=True)
def _kueue_tools() -> None:
    """Before the module's API server starts: skip without ../shared's Kueue (fail under CI)."""
    shared_folder.require("tools", "kueue", "start.sh")


@dataclass
class N:
    """A Node of a scenario: its rack (block b1 unless ``block``) and what differs from a healthy 8-GPU node."""

    rack: str
    block: str = "b1"
    alloc: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)
    ready: bool = True
    cordoned: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    flavor: str = "a"  # the flavor (of the scenario) whose node labels select it


@dataclass
class S:
    """A scenario: its nodes, bound non-TAS pods (node index, requests), flavors, the ClusterQueue's
    flavors in order, the Workload's pod sets, and Kueue's expected decision."""

    name: str
    nodes: list[N]
    podsets: list[dict[str, Any]]
    admit: bool
    pods: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    flavor_tolerations: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    queue: tuple[str, ...] = ("a",)
    pod_allocatable_one: bool = False


def ps(count: int, gpus: int, request: dict[str, Any] | None, *, name: str = "main", memory: str = "1Gi",
       tolerations: list[dict[str, str]] | None = None, selector: dict[str, str] | None = None,
       affinity: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [{"name": "c", "image": "trainer", "resources": {
        "requests": {"cpu": "1", "memory": memory, GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}
    if tolerations:
        spec["tolerations"] = tolerations
    if selector:
        spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    out: dict[str, Any] = {"name": name, "count": count, "template": {"spec": spec}}
    if request is not None:
        out["topologyRequest"] = request
    return out


REQ_RACK = {"required": RACK}
DEDICATED = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
TOLERATE = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
TWO = [N("r1"), N("r1")]
SCENARIOS = [
    S("taint-untolerated", [N("r1", taints=[DEDICATED]), N("r1", taints=[DEDICATED])], [ps(2, 8, REQ_RACK)], False),
    S("taint-flavor", [N("r1", taints=[DEDICATED]), N("r1", taints=[DEDICATED])], [ps(2, 8, REQ_RACK)], True,
      flavor_tolerations={"a": TOLERATE}),
    S("taint-template", [N("r1", taints=[DEDICATED]), N("r1", taints=[DEDICATED])], [ps(2, 8, REQ_RACK, tolerations=TOLERATE)], True),
    S("queue-own-flavor-only", [N("r1"), N("r2", flavor="b"), N("r2", flavor="b")], [ps(2, 8, REQ_RACK)], False),
    S("queue-second-flavor", [N("r1"), N("r2", flavor="b"), N("r2", flavor="b")], [ps(2, 8, REQ_RACK)], True, queue=("a", "b")),
    S("memory-too-much", TWO, [ps(2, 8, REQ_RACK, memory="100Gi")], False),
    S("memory-fits", TWO, [ps(2, 8, REQ_RACK, memory="32Gi")], True),
    S("pods-full", [N("r1", alloc={"pods": "1"}), N("r1", alloc={"pods": "1"})], [ps(1, 1, REQ_RACK)], False,
      pods=[(0, {}), (1, {})]),
    S("pods-room", [N("r1", alloc={"pods": "2"}), N("r1", alloc={"pods": "1"})], [ps(1, 1, REQ_RACK)], True,
      pods=[(0, {}), (1, {})]),
    S("affinity-mismatch", [N("r1", labels={"gpu": "h100"}), N("r1", labels={"gpu": "h100"})],
      [ps(2, 8, REQ_RACK, affinity={"nodeSelectorTerms": [{"matchExpressions": [
          {"key": "gpu", "operator": "In", "values": ["b200"]}]}]})], False),
    S("affinity-match", [N("r1", labels={"gpu": "h100"}), N("r1", labels={"gpu": "h100"})],
      [ps(2, 8, REQ_RACK, affinity={"nodeSelectorTerms": [{"matchExpressions": [
          {"key": "gpu", "operator": "In", "values": ["h100"]}]}]})], True),
    S("selector-mismatch", TWO, [ps(2, 8, REQ_RACK, selector={"gpu": "b200"})], False),
    S("group-fits", TWO, [ps(1, 1, REQ_RACK | {"podSetGroupName": "g"}, name="leader"),
                          ps(2, 7, REQ_RACK | {"podSetGroupName": "g"}, name="workers")], True),
    S("group-too-big", TWO, [ps(1, 1, REQ_RACK | {"podSetGroupName": "g"}, name="leader"),
                             ps(2, 8, REQ_RACK | {"podSetGroupName": "g"}, name="workers")], False),
    S("pod-sets-in-turn", TWO, [ps(1, 8, REQ_RACK, name="first"), ps(2, 8, REQ_RACK, name="second")], False),
    S("non-tas-pod-blocks", TWO, [ps(2, 8, REQ_RACK)], False, pods=[(0, {GPU: "8"})]),
    S("non-tas-pod-leaves-room", TWO, [ps(2, 4, REQ_RACK)], True, pods=[(0, {GPU: "4"})]),
    S("slices-fit", [N("r1"), N("r2")], [ps(4, 4, {"required": BLOCK, "podSetSliceRequiredTopology": RACK,
                                                    "podSetSliceSize": 2})], True),
    S("slices-too-big", [N("r1"), N("r2")], [ps(4, 4, {"required": BLOCK, "podSetSliceRequiredTopology": RACK,
                                                        "podSetSliceSize": 4})], False),
    S("not-ready", [N("r1"), N("r1", ready=False)], [ps(2, 8, REQ_RACK)], False),
    S("cordoned", [N("r1"), N("r1", cordoned=True)], [ps(2, 8, REQ_RACK)], False),
    S("healthy", TWO, [ps(2, 8, REQ_RACK)], True),
    S("preferred-spreads", [N("r1"), N("r1"), N("r2"), N("r2")], [ps(3, 8, {"preferred": RACK})], True),
    S("required-does-not-spread", [N("r1"), N("r1"), N("r2"), N("r2")], [ps(3, 8, REQ_RACK)], False),
]


def _ns(s: S) -> str:
    return f"s-{s.name}"


def _objects(s: S) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], N]], list[dict[str, Any]], dict[str, Any]]:
    """(setup objects, nodes with their N, pods, the Workload) of one scenario."""
    ns, flavors = _ns(s), sorted({n.flavor for n in s.nodes} | set(s.queue))
    setup: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                                   {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}]
    for f in flavors:
        spec: dict[str, Any] = {"nodeLabels": {SCENARIO_LABEL: f"{s.name}-{f}"}, "topologyName": "gpu-topology"}
        if s.flavor_tolerations.get(f):
            spec["tolerations"] = s.flavor_tolerations[f]
        setup.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"{s.name}-{f}"},
                      "spec": spec})
    quota = [{"name": r, "nominalQuota": q} for r, q in (("cpu", "1000"), ("memory", "10Ti"), (GPU, "1000"))]
    setup.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"cq-{s.name}"},
                  "spec": {"namespaceSelector": {}, "stopPolicy": "Hold", "resourceGroups": [{
                      "coveredResources": ["cpu", "memory", GPU],
                      "flavors": [{"name": f"{s.name}-{f}", "resources": quota} for f in s.queue]}]}})
    setup.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": ns},
                  "spec": {"clusterQueue": f"cq-{s.name}"}})
    nodes = []
    for i, n in enumerate(s.nodes):
        name = f"{s.name}-{i}"
        nodes.append(({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            SCENARIO_LABEL: f"{s.name}-{n.flavor}", BLOCK: f"{s.name}-{n.block}", RACK: f"{s.name}-{n.block}-{n.rack}",
            HOST: name, **n.labels}}}, n))
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"other-{k}", "namespace": ns,
                                                           "labels": {"scheduling.x-k8s.io/pod-group": "other"}},
             "spec": {"nodeName": f"{s.name}-{i}", "automountServiceAccountToken": False, "containers": [
                 {"name": "c", "image": "x", "resources": {"requests": req, "limits": req} if req else {}}]}}
            for k, (i, req) in enumerate(s.pods)]
    wl = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "job", "namespace": ns},
          "spec": {"queueName": "lq", "podSets": s.podsets}}
    return setup, nodes, pods, wl


def _node_status(n: N, now: str) -> dict[str, Any]:
    alloc = {**ALLOCATABLE, **n.alloc}
    return {"capacity": alloc, "allocatable": alloc, "conditions": [{
        "type": "Ready", "status": "True" if n.ready else "False", "reason": "KubeletReady" if n.ready else "KubeletNotReady",
        "message": "written by the test", "lastHeartbeatTime": now, "lastTransitionTime": now}]}


def _build(cluster: RealCluster) -> dict[str, dict[str, Any]]:
    admin = cluster.admin
    admin.ensure({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "gpu-topology"},
                  "spec": {"levels": [{"nodeLabel": k} for k in (BLOCK, RACK, HOST)]}})
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    workloads = {}
    for s in SCENARIOS:
        setup, nodes, pods, wl = _objects(s)
        for obj in setup:
            admin.ensure(obj)
        for obj, n in nodes:
            admin.create(obj)
            path = admin.path(obj)
            admin.request("PATCH", path + "/status", {"status": _node_status(n, now)},
                          content_type="application/merge-patch+json")
            # The apiserver's TaintNodesByCondition put node.kubernetes.io/not-ready on the new Node;
            # the node-lifecycle controller (not running here) lifts it once Ready, keeps it while
            # NotReady, and adds node.kubernetes.io/unschedulable to a cordoned node.
            taints = list(n.taints)
            if not n.ready:
                taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"})
            if n.cordoned:
                taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            admin.request("PATCH", path, {"spec": {"taints": taints or None, "unschedulable": n.cordoned or None}},
                          content_type="application/merge-patch+json")
        for obj in pods:
            admin.create(obj)
        workloads[s.name] = admin.create(wl)
    return workloads


def _kueue_decision(cluster: RealCluster, s: S) -> tuple[bool, str] | None:
    wl = cluster.admin.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{_ns(s)}/workloads/job")
    qr = next((c for c in (wl.get("status") or {}).get("conditions") or [] if c["type"] == "QuotaReserved"), None)
    if qr is None:
        return None
    if qr["status"] == "True":
        return True, qr.get("message", "")
    message = qr.get("message", "")
    if not message.startswith("couldn't assign flavors"):
        return None  # still held, or back in the queue waiting to be evaluated: not decided yet
    return False, message


@pytest.fixture(scope="module", params=[False, True], ids=["legacy-reasons", "UnadmittedWorkloadsObservability"])
def kueue_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """An apiserver of its own (Kueue's start.sh replaces the CRDs with Kueue's), Kueue on it,
    without and with the gate that makes Kueue write typed QuotaReserved reasons."""
    cluster, folder = realapi.started_cluster(tmp_path_factory, "kueue-fit")
    kc = None
    try:
        admin_kc = cluster.kubeconfig(folder / "admin.kubeconfig")
        env = {**os.environ, "TMPDIR": str(folder)}
        if request.param:
            env["KUEUE_FEATURE_GATES"] = "UnadmittedWorkloadsObservability=true"
        out = subprocess.run([str(KUEUE / "start.sh"), admin_kc], capture_output=True, text=True, env=env, timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
        kc = out.stdout.strip().splitlines()[-1]
        yield cluster, admin_kc, request.param
    finally:
        if kc:
            subprocess.run([str(KUEUE / "stop.sh"), kc], capture_output=True, timeout=60)
        cluster.stop()


async def test_gangscope_fit_agrees_with_real_kueue(kueue_cluster: Any) -> None:
    cluster, admin_kc, typed = kueue_cluster
    _build(cluster)
    collector = await started_collector(admin_kc)  # it watches the ClusterQueues created here itself
    try:
        store = collector.store
        verdicts: dict[str, Any] = {}
        deadline = time.monotonic() + 60
        while len(verdicts) < len(SCENARIOS) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            for s in SCENARIOS:
                wl = store.workload(_ns(s), "job")
                if wl is None or s.name in verdicts:
                    continue
                report = store.capacity.workload_fit(wl)
                if report is not None and report.verdict.known:
                    verdicts[s.name] = report
        assert set(verdicts) == {s.name for s in SCENARIOS}, sorted({s.name for s in SCENARIOS} - set(verdicts))
        for s in SCENARIOS:  # release the queues: Kueue decides
            cluster.admin.request("PATCH", f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq-{s.name}",
                                  {"spec": {"stopPolicy": "None"}}, content_type="application/merge-patch+json")
        decisions: dict[str, tuple[bool, str]] = {}
        deadline = time.monotonic() + 90
        while len(decisions) < len(SCENARIOS) and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            for s in SCENARIOS:
                if s.name not in decisions:
                    d = _kueue_decision(cluster, s)
                    if d is not None:
                        decisions[s.name] = d
        assert set(decisions) == {s.name for s in SCENARIOS}, sorted({s.name for s in SCENARIOS} - set(decisions))
        got = {s.name: (decisions[s.name][0], verdicts[s.name].verdict.domain) for s in SCENARIOS}
        want = {s.name: (s.admit, s.admit) for s in SCENARIOS}
        assert got == want, {n: (decisions[n][1], verdicts[n].text) for n in got if got[n] != want[n]}
        for s in SCENARIOS:
            v = verdicts[s.name].verdict
            if s.admit:
                # the same hosts and pods per pod set as the topologyAssignment Kueue wrote
                obj = cluster.admin.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{_ns(s)}/workloads/job")
                written = {a.name: sorted((d.values, d.count) for d in a.domains) for a in parse_workload(obj).assignments}
                assert written == {name: sorted(p.domains) for name, p in v.placements}, s.name
            else:
                # Kueue's message is gangscope's placement failure, word for word (for a group, Kueue
                # names any of its pod sets: TASAssignmentsResult.Failure walks a map, tas_flavor_snapshot.go:411-421)
                failed = {f"couldn't assign flavors to pod set {name}: {p.reason}" for name, p in v.placements if p.reason}
                assert decisions[s.name][1] in failed, s.name
        # both outcomes are covered
        assert {s.admit for s in SCENARIOS} == {True, False}
        # Once Kueue has written its decisions, gangscope reads them: the stage and reason of each
        # Workload, the fit of the rejected ones still 0 (never the opposite of Kueue), and the two
        # required requests that fit with their level dropped counted as blocked by fragmentation.
        reason = "TopologyPlacementFailed" if typed else "Pending"

        def seen() -> dict[str, tuple[str, str, str]]:
            out = {}
            for s in SCENARIOS:
                wl = store.workload(_ns(s), "job")
                pending = wl.state.pending if wl is not None and wl.state is not None else None
                out[s.name] = (wl.stage if wl is not None else "", pending.reason if pending else "",
                               pending.category if pending else "")
            return out

        want_seen = {s.name: ("inadmissible", reason, "capacity") if not s.admit else ("running", "", "") for s in SCENARIOS}
        deadline = time.monotonic() + 30
        while seen() != want_seen and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
        assert seen() == want_seen
        for s in SCENARIOS:
            if not s.admit:
                report = store.capacity.workload_fit(store.workload(_ns(s), "job"))
                assert report is not None and report.verdict.known and not report.verdict.domain, s.name
        text = collector.exposition.render(False).decode()
        blocked = sorted(line for line in text.splitlines() if line.startswith("gangscope_fragmentation_blocked_workloads{"))
        assert blocked == ['gangscope_fragmentation_blocked_workloads{cluster_queue="cq-required-does-not-spread",level="rack"} 1',
                           'gangscope_fragmentation_blocked_workloads{cluster_queue="cq-slices-too-big",level="block"} 1']
    finally:
        await collector.stop()
