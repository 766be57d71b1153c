"""Offline equals live: what gangscope says of a dump is what it says of the cluster the dump came from.

One kube-apiserver (1.20.2, etcd) with every CRD the collector reads and the real Kueue controller
manager v0.19.2 (``../shared/tools/kueue``) on it, for the module. Kueue decides the Workloads'
admission and topology placement; the test plays only the parts no process here plays (the
kubelet and the gang schedulers: pods' status, PodGroups' status, a Node going NotReady) and the
job controller's reports (``PodsReady``, ``Finished``). One cluster state per stage:

========================  =============================================================  =========
Workload                  how it gets there                                              gang
========================  =============================================================  =========
``wl-quota``              16 GPUs asked of a ClusterQueue with 8: Kueue leaves it
                          pending (insufficient quota)
``wl-topology``           3 pods x 8 GPUs, ``required: rack``, racks of 2 hosts: Kueue's
                          TAS cannot place it
``wl-assembling``         admitted by Kueue; one of its 2 pods bound                     Coscheduling
``wl-running``            admitted by Kueue; its pod Running, PodsReady written           Volcano
``wl-evicted``            admitted by Kueue, then its node NotReady; Evicted/NodeFailures
                          written through ``/status`` as Kueue writes it (see below)
``wl-finished``           admitted by Kueue; Finished/Succeeded written
========================  =============================================================  =========

Eviction for NodeFailures: Kueue v0.19.2 evicts so only from its TAS failed-node replacement
(the ``TASFailedNodeReplacement`` gates, with a node-failure delay and a kubelet's pod status),
which this cluster (no kubelet, no node-lifecycle controller) cannot drive in reasonable time: the
condition and ``schedulingStats.evictions`` are written through the status subresource (under a
field manager of the test's, :data:`TEST_MANAGER`), and what Kueue then does with the Workload is
left to it (the test waits until no Workload changes any more).

Then, with the cluster quiet:

1. every resource of ``COLLECTOR_RESOURCES`` is dumped as ``kubectl get -o json`` prints it (one
   List per kind, and every object of every kind shuffled into one List); ``gangscope snapshot``
   of each dump must equal the live collector's ``/metrics``, every family, but the series
   :data:`OBSERVED` names (with why);
2. ``gangscope explain --from-file``, ``gangscope explain --kubeconfig`` and the collector's
   ``/debug/explain`` must give each Workload the same document but ``generated_at`` and the
   fields :data:`NOW_FIELDS` names.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import realapi
import shared_folder
import structlog
from collectors import started_collector
from kueue_objects import BLOCK, HOST, RACK, series
from realapi import ApiStatusError, RealCluster

from exporter import explain
from exporter.kube.resources import COLLECTOR_RESOURCES, QUEUE_POSITIONS

KUEUE = shared_folder.root() / "tools" / "kueue"
REPO = Path(__file__).resolve().parents[1]
GPU = "nvidia.com/gpu"
NS = "equiv"
WORKLOADS = ("wl-quota", "wl-topology", "wl-assembling", "wl-running", "wl-evicted", "wl-finished")
# Kueue's visibility API (queue positions) is an aggregated API served by Kueue itself, off here
# (start.sh: VisibilityOnDemand false): the collector finds it not served, a dump has none.
SERVED = [r for r in COLLECTOR_RESOURCES if r.source != QUEUE_POSITIONS.source]

# What gangscope must make of the six states (stage of gangscope_workload_stage, explain's verdict layer).
STAGES = {"wl-quota": "inadmissible", "wl-topology": "inadmissible", "wl-assembling": "assembling",
          "wl-running": "running", "wl-evicted": "evicting", "wl-finished": "finished"}
VERDICTS = {"wl-quota": "admission", "wl-topology": "placement", "wl-assembling": "assembly",
            "wl-running": None, "wl-evicted": "placement", "wl-finished": None}

# Families (prefixes) left out: they depend on how the collector observed the cluster, never on
# the objects (a dump has no history and no "now"). Each with why. Only gangscope_ families are
# compared: the others (process_, python_) are the serving process's runtime.
OBSERVED: dict[str, str] = {
    "gangscope_source_": "health of each LIST/WATCH (up, last sync, errors, objects per informer source): the dump "
    "was not watched, and a snapshot's sources are the dump's kinds",
    "gangscope_shard_ordinal": "the serving process's place in its StatefulSet (exporter/kube/sharding.py export_shard): "
    "a snapshot is no shard, and exporting one would count in the missing-shard arithmetic of the alerts",
    "gangscope_total_shards": "as gangscope_shard_ordinal",
    "gangscope_build_info": "the serving process's version (the collector's self-metrics; a snapshot prints none)",
    # Counted per reader: the collector per informer source, a snapshot per kind of the dump
    # ("pods" for every pod); each must be 0 on both sides (ZERO), whatever its labels.
    "gangscope_internal_errors_total": "per-reader error counters, labelled by how each reads (0 here: ZERO)",
    "gangscope_parse_errors_total": "per-reader parse error counters, labelled by how each reads (0 here: ZERO)",
}
ZERO = ("gangscope_internal_errors_total", "gangscope_parse_errors_total")

# Families whose series must be the same but whose value may differ: it is when the collector saw
# something, where the object carries no time for it.
OBSERVED_VALUE: dict[str, str] = {
    "gangscope_podgroup_phase_timestamp_seconds": "Coscheduling and Volcano PodGroups without a condition for their "
    "phase: when the phase was first seen (exporter.cluster.podgroups.settle_phase_since), each reader's own moment",
    "gangscope_gang_idle_gpu_seconds_total": "GPU-seconds a partially bound gang held idle while the collector watched "
    "it: a counter of observed time, 0 for a reader that has just read the objects",
}

pytestmark = [pytest.mark.realapi, pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on this machine")]


@pytest.fixture(scope="module", autouse=True)
def _kueue_tools() -> None:
    """Before the module's API server starts: skip without ../shared's Kueue (fail under CI)."""
    shared_folder.require("tools", "kueue", "start.sh")


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """explain.run configures structlog on the (captured) stderr; later tests must not log into a closed file."""
    yield
    structlog.reset_defaults()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _pod_spec(gpus: int, **extra: Any) -> dict[str, Any]:
    return {"restartPolicy": "Never", "automountServiceAccountToken": False, **extra, "containers": [
        {"name": "c", "image": "trainer", "resources": {"requests": {"cpu": "1", GPU: str(gpus)}, "limits": {GPU: str(gpus)}}}]}


def _workload(name: str, queue: str, count: int, gpus: int, topology: dict[str, str] | None,
              labels: dict[str, str] | None = None) -> dict[str, Any]:
    podset: dict[str, Any] = {"name": "main", "count": count,
                              "template": {"metadata": {"labels": labels or {}}, "spec": _pod_spec(gpus)}}
    if topology:
        podset["topologyRequest"] = topology
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": NS},
            "spec": {"queueName": queue, "podSets": [podset]}}


def _setup_objects() -> list[dict[str, Any]]:
    """Topology, flavors (one TAS over six 8-GPU hosts in three racks of two, one plain), two
    ClusterQueues (TAS with room, plain with 8 GPUs), their LocalQueues."""
    quota = lambda gpus: [{"name": "cpu", "nominalQuota": "1000"}, {"name": GPU, "nominalQuota": str(gpus)}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": NS}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "gpu-topology"},
         "spec": {"levels": [{"nodeLabel": k} for k in (BLOCK, RACK, HOST)]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "tas"},
         "spec": {"nodeLabels": {"gangscope.test/pool": "tas"}, "topologyName": "gpu-topology"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "plain"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq-tas"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", GPU],
                                                                "flavors": [{"name": "tas", "resources": quota(1000)}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq-small"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", GPU],
                                                                "flavors": [{"name": "plain", "resources": quota(8)}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq-tas", "namespace": NS},
         "spec": {"clusterQueue": "cq-tas"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq-small", "namespace": NS},
         "spec": {"clusterQueue": "cq-small"}},
    ]


HOSTS = [(f"h{i}", f"r{i // 2 + 1}") for i in range(6)]


def _node_status(ready: bool) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"}
    return {"capacity": alloc, "allocatable": alloc, "conditions": [{
        "type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "written by the test", "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}


def _set_node(cluster: RealCluster, name: str, ready: bool) -> None:
    """Status as a kubelet writes it; taints as the node-lifecycle controller keeps them (not running here)."""
    path = f"/api/v1/nodes/{name}"
    cluster.admin.request("PATCH", path + "/status", {"status": _node_status(ready)}, content_type="application/merge-patch+json")
    taints = None if ready else [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    cluster.admin.request("PATCH", path, {"spec": {"taints": taints}}, content_type="application/merge-patch+json")


def _get(cluster: RealCluster, name: str) -> dict[str, Any]:
    return cluster.admin.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/{name}")


def _conditions(wl: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (wl.get("status") or {}).get("conditions") or []}


# The field manager of the test's status writes. Not Kueue's own ("kueue-admission"): Kueue applies
# its whole status with that manager (server-side apply, forced), and an apply that omits a
# condition its manager owns removes it, so Kueue's next write would drop what the test wrote.
TEST_MANAGER = "gangscope-test"


def _add_conditions(cluster: RealCluster, name: str, *conds: dict[str, Any], **status: Any) -> None:
    """Conditions added to the Workload's status through ``/status`` (a read-modify-write: a
    conflict with Kueue's own write is retried)."""
    for _ in range(20):
        wl = _get(cluster, name)
        have = [c for c in wl["status"].get("conditions") or [] if c["type"] not in {c["type"] for c in conds}]
        wl["status"]["conditions"] = have + [{"lastTransitionTime": _now(), "message": "", **c} for c in conds]
        wl["status"].update(status)
        try:
            cluster.admin.request("PUT", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NS}/workloads/{name}/status", wl,
                                  params={"fieldManager": TEST_MANAGER})
            return
        except ApiStatusError as e:
            if e.status != 409:
                raise
            time.sleep(0.2)
    raise AssertionError(f"could not write the status of {name}")


def _until(what: str, predicate: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def _hosts_of(wl: dict[str, Any]) -> list[str]:
    from exporter.cluster.workloads import parse_workload

    return sorted(d.values[-1] for a in parse_workload(wl).assignments for d in a.domains)


def _pod(name: str, labels: dict[str, str], node: str | None, *, scheduler: str | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if node:
        extra["nodeName"] = node
    if scheduler:
        extra["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": labels, "annotations": annotations or {}},
            "spec": _pod_spec(8, **extra)}


def _with_status(cluster: RealCluster, obj: dict[str, Any]) -> None:
    """Created, and its status written as its scheduler writes it (through ``/status`` where the CRD has one)."""
    created = cluster.admin.create(obj)
    if cluster.admin.has_status(obj["apiVersion"], obj["kind"]):
        created["status"] = obj["status"]
        cluster.admin.request("PUT", cluster.admin.path(created) + "/status", created)


def _build(cluster: RealCluster) -> None:
    """The six states, Kueue deciding admission and placement."""
    admin = cluster.admin
    for obj in _setup_objects():
        admin.ensure(obj)
    for name, rack in HOSTS:
        admin.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "gangscope.test/pool": "tas", BLOCK: "b1", RACK: rack, HOST: name}}})
        _set_node(cluster, name, True)
    required = {"required": RACK}
    pg_label = "scheduling.x-k8s.io/pod-group"
    admin.create(_workload("wl-quota", "lq-small", 2, 8, None))
    admin.create(_workload("wl-topology", "lq-tas", 3, 8, required))
    admin.create(_workload("wl-assembling", "lq-tas", 2, 8, required, {pg_label: "pg-assembling"}))
    for name in ("wl-running", "wl-evicted", "wl-finished"):
        admin.create(_workload(name, "lq-tas", 1, 8, required))

    def decided() -> bool:
        conds = {n: _conditions(_get(cluster, n)) for n in WORKLOADS}
        admitted = all(conds[n].get("Admitted", {}).get("status") == "True" for n in WORKLOADS[2:])
        pending = all(conds[n].get("QuotaReserved", {}).get("status") == "False" for n in WORKLOADS[:2])
        return admitted and pending

    _until("Kueue to admit four Workloads and leave two pending", decided, 60)
    assert "insufficient quota" in _conditions(_get(cluster, "wl-quota"))["QuotaReserved"]["message"]
    assert "topology" in _conditions(_get(cluster, "wl-topology"))["QuotaReserved"]["message"]
    _quiet(cluster)  # Kueue's writes of the admissions are done before the test adds its own

    # Assembling: a Coscheduling gang of 2, one pod bound to its host, the other not yet.
    hosts = _hosts_of(_get(cluster, "wl-assembling"))
    assert len(hosts) == 2, hosts
    kueue_labels = {"kueue.x-k8s.io/podset": "main", pg_label: "pg-assembling"}
    _with_status(cluster, {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                           "metadata": {"name": "pg-assembling", "namespace": NS}, "spec": {"minMember": 2},
                           "status": {"phase": "Scheduling", "scheduled": 1, "running": 0}})
    admin.create(_pod("asm-0", kueue_labels, hosts[0]))
    admin.create(_pod("asm-1", kueue_labels, None))

    # Running: a Volcano gang of 1, its pod Running on Kueue's host; PodsReady as the job reconciler writes it.
    host = _hosts_of(_get(cluster, "wl-running"))[0]
    _with_status(cluster, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                           "metadata": {"name": "pg-running", "namespace": NS}, "spec": {"minMember": 1, "queue": "default"},
                           "status": {"phase": "Running", "running": 1}})
    pod = admin.create(_pod("run-0", {"kueue.x-k8s.io/podset": "main"}, host, scheduler="volcano",
                            annotations={"scheduling.k8s.io/group-name": "pg-running"}))
    pod["status"] = {"phase": "Running", "startTime": _now(), "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "c", "image": "trainer", "imageID": "", "ready": True, "restartCount": 0,
                               "started": True, "state": {"running": {"startedAt": _now()}}}]}
    admin.request("PUT", f"/api/v1/namespaces/{NS}/pods/run-0/status", pod)
    _add_conditions(cluster, "wl-running", {"type": "PodsReady", "status": "True", "reason": "Started",
                                            "message": "All pods reached readiness"})

    # Finished, as the job reconciler writes it.
    _add_conditions(cluster, "wl-finished", {"type": "Finished", "status": "True", "reason": "Succeeded",
                                             "message": "Job finished successfully"})

    # Evicted for NodeFailures: its node fails (Kueue reacts to the NotReady node first: quiet),
    # then Kueue's eviction written as Kueue writes it. Kueue's own later status writes raced with
    # the written condition in 1 run of 4 here: rewritten until it holds through a quiet spell.
    failed = _hosts_of(_get(cluster, "wl-evicted"))[0]
    _set_node(cluster, failed, False)
    _quiet(cluster)
    for _ in range(3):
        _add_conditions(cluster, "wl-evicted", {"type": "Evicted", "status": "True", "reason": "NodeFailures",
                                                "message": f"Workload was evicted as there was no replacement for a failed node: {failed}"},
                        schedulingStats={"evictions": [{"reason": "NodeFailures", "underlyingCause": "", "count": 1}]},
                        unhealthyNodes=[{"name": failed}])
        _quiet(cluster)
        if _conditions(_get(cluster, "wl-evicted")).get("Evicted", {}).get("reason") == "NodeFailures":
            break


def _quiet(cluster: RealCluster, seconds: float = 3.0, timeout: float = 60) -> None:
    """Until no Workload has changed for ``seconds``: Kueue has done what it does with the states."""
    def versions() -> dict[str, str]:
        return {n: _get(cluster, n)["metadata"]["resourceVersion"] for n in WORKLOADS}

    last, since, deadline = versions(), time.monotonic(), time.monotonic() + timeout
    while time.monotonic() - since < seconds:
        assert time.monotonic() < deadline, "Kueue kept changing the Workloads"
        time.sleep(0.5)
        now = versions()
        if now != last:
            last, since = now, time.monotonic()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealCluster, str]]:
    """An API server of the module's own (Kueue's start.sh replaces the Kueue CRDs with its own
    conversion-webhook copies, which must not reach the session's shared server), with every
    other CRD the collector reads, Kueue on it, and the six states built."""
    c, folder = realapi.started_cluster(tmp_path_factory, "equiv")
    kc = None
    try:
        c.install_crds()
        admin_kc = c.kubeconfig(folder / "admin.kubeconfig")
        env = {**os.environ, "TMPDIR": str(folder)}
        out = subprocess.run([str(KUEUE / "start.sh"), admin_kc], check=False, capture_output=True, text=True, env=env, timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
        kc = out.stdout.strip().splitlines()[-1]
        c.namespace(NS)
        _build(c)
        _quiet(c)
        written = {n: {t: (cd["status"], cd["reason"]) for t, cd in _conditions(_get(c, n)).items()} for n in WORKLOADS}
        assert written["wl-running"].get("PodsReady") == ("True", "Started"), written
        assert written["wl-finished"].get("Finished") == ("True", "Succeeded"), written
        assert written["wl-evicted"].get("Evicted") == ("True", "NodeFailures"), written
        yield c, admin_kc
    finally:
        if kc:
            subprocess.run([str(KUEUE / "stop.sh"), kc], check=False, capture_output=True, timeout=60)
        c.stop()


def _dump(c: RealCluster, kubeconfig: str, folder: Path) -> tuple[Path, Path]:
    """``kubectl get -o json``: one List per kind in ``folder/kinds``, and every object of every
    kind shuffled into ``folder/all.json``. Pods are one kind: every pod of the cluster (each is in
    one of the collector's pod selections here)."""
    kinds = folder / "kinds"
    kinds.mkdir(parents=True)
    items: list[dict[str, Any]] = []
    seen: set[str] = set()
    for r in SERVED:
        version = realapi.served_version(c, r)
        assert version is not None, f"{r.source} is not served"
        name = r.plural if not r.group else f"{r.plural}.{version}.{r.group}"
        if name in seen:
            continue
        seen.add(name)
        out = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "get", name, "-o", "json",
                              *(["-A"] if r.namespaced else [])], check=False, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        (kinds / f"{name}.json").write_text(out.stdout)
        items += json.loads(out.stdout)["items"]
    random.Random(7).shuffle(items)
    everything = folder / "all.json"
    everything.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}))
    return kinds, everything


def _gangscope(*argv: str) -> str:
    """The ``gangscope`` command, as a user runs it."""
    out = subprocess.run([sys.executable, "-m", "exporter", *argv], check=False, capture_output=True, text=True, timeout=120,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _errors(text: str) -> dict[tuple[str, frozenset], float]:
    """The :data:`ZERO` series that are not 0."""
    return {k: v for k, v in series(text).items() if k[0] in ZERO and v != 0}


def _families(text: str) -> dict[tuple[str, frozenset], float | None]:
    """Every gangscope series but :data:`OBSERVED`'s; :data:`OBSERVED_VALUE`'s with their value dropped."""
    return {k: (None if k[0] in OBSERVED_VALUE else v) for k, v in series(text).items()
            if not k[0].startswith(tuple(OBSERVED))}


def _diff(want: dict, got: dict) -> str:
    missing = sorted(set(want) - set(got), key=str)
    extra = sorted(set(got) - set(want), key=str)
    changed = sorted((k for k in set(want) & set(got) if want[k] != got[k]), key=str)
    return (f"only offline: {missing[:6]}\nonly live: {extra[:6]}\n"
            f"changed: {[(k, want[k], got[k]) for k in changed[:6]]}")


async def test_snapshot_and_explain_of_a_dump_equal_the_live_collector(cluster: tuple[RealCluster, str], tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    c, kubeconfig = cluster
    kinds, everything = _dump(c, kubeconfig, tmp_path)
    collector = await started_collector(kubeconfig)
    try:
        async with aiohttp.ClientSession() as s:
            async def scrape() -> str:
                async with s.get(f"http://127.0.0.1:{collector.port}/metrics") as r:
                    assert r.status == 200
                    return await r.text()

            page = _gangscope("snapshot", "--from-file", str(kinds))
            offline = _families(page)
            shuffled_page = _gangscope("snapshot", "--from-file", str(everything))
            shuffled = _families(shuffled_page)
            assert not _errors(page) and not _errors(shuffled_page), (_errors(page), _errors(shuffled_page))
            assert shuffled == offline, "one file or one per kind: " + _diff(offline, shuffled)
            assert any(k[0] == "gangscope_workload_stage" for k in offline)
            # The collector has synced every source; its handlers may still be settling a moment.
            deadline = time.monotonic() + 15
            while (live := _families(await scrape())) != offline and time.monotonic() < deadline:
                await asyncio.sleep(0.3)
            failures = [] if live == offline else ["metrics: " + _diff(offline, live)]
            if _errors(await scrape()):
                failures.append(f"live errors: {_errors(await scrape())}")
            stages = {dict(k[1])["workload"]: dict(k[1])["stage"] for k, v in live.items()
                      if k[0] == "gangscope_workload_stage" and v == 1}
            # Each state is the one built (Kueue's "16 > 8 GPUs" can never fit: inadmissible, not queued).
            assert stages == STAGES, stages

            docs: dict[str, dict[str, dict[str, Any]]] = {"offline": {}, "live": {}, "route": {}}
            for name in WORKLOADS:
                docs["offline"][name] = await _explain(capsys, f"{NS}/{name}", "--from-file", str(everything))
                docs["live"][name] = await _explain(capsys, f"{NS}/{name}", "--kubeconfig", kubeconfig)
                async with s.get(f"http://127.0.0.1:{collector.port}/debug/explain",
                                 params={"namespace": NS, "name": name}) as r:
                    assert r.status == 200, await r.text()
                    docs["route"][name] = json.loads(await r.text())
    finally:
        await collector.stop()
    for name in WORKLOADS:
        want = _comparable(docs["offline"][name])
        for how in ("live", "route"):
            if _comparable(docs[how][name]) != want:
                failures.append(f"explain {name} offline != {how}: {_doc_diff(want, _comparable(docs[how][name]))}")
    assert not failures, "\n".join(failures)
    verdicts = {name: docs["offline"][name]["verdict"]["layer"] for name in WORKLOADS}
    assert verdicts == VERDICTS, verdicts


async def _explain(capsys: pytest.CaptureFixture[str], target: str, *argv: str) -> dict[str, Any]:
    """``gangscope explain TARGET --output json ...`` (exporter.explain.run, the command's own entry)."""
    p = argparse.ArgumentParser()
    explain.add_arguments(p)
    args = p.parse_args([target, "--output", "json", "--sync-timeout", "20", *argv])
    capsys.readouterr()
    rc = await asyncio.to_thread(explain.run, args)
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


# Fields of an explain document that depend on "now" (the moment it was made), never on the objects.
NOW_FIELDS = ("generated_at",)
# What depends on when the reader first saw something: a PodGroup's phase start where its API has no
# time for it (``phase_since_source: observed``), dropped from the evidence, and the phrase the
# summaries quote it in (exporter/explain.py, "seen since", only once it is a second old).
SEEN_SINCE = re.compile(r" \(seen since [^)]*\)")


def _comparable(doc: Any) -> Any:
    """The document without :data:`NOW_FIELDS` and what :data:`SEEN_SINCE` names."""
    if isinstance(doc, dict):
        observed = doc.get("phase_since_source") == "observed"
        return {k: _comparable(v) for k, v in doc.items()
                if k not in NOW_FIELDS and not (observed and k == "phase_since")}
    if isinstance(doc, list):
        return [_comparable(v) for v in doc]
    if isinstance(doc, str):
        return SEEN_SINCE.sub("", doc)
    return doc


def _doc_diff(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _doc_diff(a.get(k), b.get(k), f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _doc_diff(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]
