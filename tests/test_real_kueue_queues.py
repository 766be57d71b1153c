"""A real Kueue decides, gangscope must agree: ClusterQueues that are stopped or name a missing flavor.

The upstream Kueue controller manager v0.19.2 (../shared/tools/kueue, README there) runs against a
kube-apiserver of the suite of its own (Kueue replaces the CRDs with its conversion-webhook copies,
which must not reach the session's shared server). Objects are created through the API as a
user would; Kueue writes every status. Then gangscope's collector, watching the same server, must
give each Workload the stage and category that Kueue's decision means, with and without the
``UnadmittedWorkloadsObservability`` gate (the typed ``Suspended`` or the legacy reasons), and
export each ClusterQueue's Active state with Kueue's reason:

- ``cq-ok``: a flavor that exists; its Workload is admitted (running).
- ``cq-stop``: ``stopPolicy: Hold``; Kueue marks it inactive with reason ``Stopped`` and its
  Workload waits on "ClusterQueue cq-stop is inactive": held (policy), never paged.
- ``cq-missing``: names a ResourceFlavor that does not exist; reason ``FlavorNotFound``, the same
  message for its Workload: inadmissible (configuration), which GangscopeWorkloadMisconfigured
  pages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import realapi
import shared_folder
from collectors import started_collector
from kueue_objects import family_series, local_queue
from waiting import eventually

KUEUE = shared_folder.root() / "tools" / "kueue"
pytestmark = [pytest.mark.realapi, pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on this machine")]


@pytest.fixture(scope="module", autouse=True)
def _kueue_tools() -> None:
    """Before the module's API server starts: skip without ../shared's Kueue (fail under CI)."""
    shared_folder.require("tools", "kueue", "kueue")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[realapi.RealCluster]:
    bin_dir = realapi.binaries()
    if isinstance(bin_dir, realapi.RealApiUnavailable):
        pytest.fail(str(bin_dir), pytrace=False)
    c = realapi.RealCluster(bin_dir, tmp_path_factory.mktemp("kueue-apiserver"))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def start_kueue(kubeconfig: str, tmp: Path, gates: str) -> str:
    env = {**os.environ, "TMPDIR": str(tmp), "KUEUE_FEATURE_GATES": gates}
    out = subprocess.run([str(KUEUE / "start.sh"), kubeconfig], capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def objects(ns: str, suffix: str) -> list[dict[str, Any]]:
    """The ResourceFlavor, three ClusterQueues, their LocalQueues and one Workload each (1 pod, 1 CPU)."""
    def cq(name: str, flavor: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"{name}-{suffix}"},
                "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                    {"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "10"}]}]}], **spec}}

    def wl(name: str, queue: str) -> dict[str, Any]:
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": name, "namespace": ns},
                "spec": {"queueName": queue, "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}}]}}

    flavor = f"default-{suffix}"
    out: list[dict[str, Any]] = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": flavor}}]
    for name, spec in (("cq-ok", cq("cq-ok", flavor)), ("cq-stop", cq("cq-stop", flavor, stopPolicy="Hold")),
                       ("cq-missing", cq("cq-missing", f"gone-{suffix}"))):
        out += [spec, local_queue(f"lq-{name}", ns, spec["metadata"]["name"]), wl(f"wl-{name}", f"lq-{name}")]
    return out


def written(admin: Any, ns: str, name: str) -> tuple[str, str, str] | None:
    """QuotaReserved as Kueue wrote it: (status, reason, message), None before it did."""
    obj = admin.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads/{name}")
    conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    c = conds.get("QuotaReserved")
    return (c["status"], c.get("reason", ""), c.get("message", "")) if c else None


@pytest.mark.parametrize("gate", ["UnadmittedWorkloadsObservability=false", "UnadmittedWorkloadsObservability=true"])
async def test_stage_of_a_stopped_and_a_misconfigured_cluster_queue(cluster: realapi.RealCluster, tmp_path: Path,
                                                                    gate: str) -> None:
    suffix = uuid.uuid4().hex[:5]
    ns = cluster.namespace(f"rk-{suffix}")
    kubeconfig = cluster.kubeconfig(tmp_path / "admin")
    kc = start_kueue(kubeconfig, tmp_path, gate)
    try:
        for obj in objects(ns, suffix):
            cluster.admin.create(obj)
        # Kueue decides: every Workload gets QuotaReserved, every queue its Active condition.
        deadline = time.monotonic() + 60
        decided: dict[str, tuple[str, str, str] | None] = {}
        while time.monotonic() < deadline:
            decided = {q: written(cluster.admin, ns, f"wl-{q}") for q in ("cq-ok", "cq-stop", "cq-missing")}
            if all(decided.values()):
                break
            time.sleep(0.5)
        assert all(decided.values()), decided
        assert decided["cq-ok"][0] == "True", decided
        # What v0.19.2 wrote here: the workload controller's queue check, "Inadmissible" without the
        # gate and "Suspended" with it (workload_controller.go getQueueBlocker), the same message for
        # a stopped queue and a queue missing its flavor: only the queue's Active condition tells them apart.
        reason = "Suspended" if gate.endswith("true") else "Inadmissible"
        for q in ("cq-stop", "cq-missing"):
            assert decided[q] == ("False", reason, f"ClusterQueue {q}-{suffix} is inactive"), decided

        collector = await started_collector(kubeconfig, "--resources=workloads,localqueues,clusterqueues,resourceflavors")
        try:
            await eventually(lambda: all(collector.store.workload(ns, f"wl-{q}") is not None
                                         for q in ("cq-ok", "cq-stop", "cq-missing")), timeout=10)
            await eventually(lambda: {f"{q}-{suffix}" for q in ("cq-ok", "cq-stop", "cq-missing")}
                             <= set(collector.store.cluster_queues), timeout=10)
            states = {q: collector.store.workload(ns, f"wl-{q}").state for q in ("cq-ok", "cq-stop", "cq-missing")}
            got = {q: (s.stage, s.pending.category if s.pending else None) for q, s in states.items()}
            assert got == {"cq-ok": ("running", None), "cq-stop": ("held", "policy"),
                           "cq-missing": ("inadmissible", "configuration")}, (got, decided)
            active = family_series(collector.exposition, "gangscope_cluster_queue_active")
            ours = {dict(k)["cluster_queue"]: (dict(k)["reason"], v) for k, v in active.items()
                    if dict(k)["cluster_queue"].endswith(suffix)}
            assert ours == {f"cq-ok-{suffix}": ("Ready", 1), f"cq-stop-{suffix}": ("Stopped", 0),
                            f"cq-missing-{suffix}": ("FlavorNotFound", 0)}
        finally:
            await collector.stop()
    finally:
        subprocess.run([str(KUEUE / "stop.sh"), kc], capture_output=True, timeout=60)
