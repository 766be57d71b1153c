"""Live ``gangscope explain`` against a real kube-apiserver, as a user whose RBAC covers one
namespace: it reads that namespace's Workloads, LocalQueues and PodGroups, and the Nodes of the
job's assignment when it may (the block and rack of each host), nothing cluster-wide it is not
allowed to list. The real RBAC authorizer decides; a cluster-wide LIST would be refused."""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from exporter import explain
from kueue_objects import BLOCK, HOST, RACK, admitted_conditions, cond, workload
from realapi import RealCluster, Writer

READER_RULES = [
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "localqueues"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["scheduling.x-k8s.io", "scheduling.sigs.k8s.io", "scheduling.volcano.sh", "scheduling.k8s.io"],
     "resources": ["podgroups", "workloads"], "verbs": ["get", "list", "watch"]},
]


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """explain.run configures structlog on the (captured) stderr; later tests must not log into a closed file."""
    yield
    structlog.reset_defaults()


@pytest.fixture
def team(real_api: RealCluster) -> Iterator[tuple[str, str, list[str], Writer]]:
    prefix = f"x{uuid.uuid4().hex[:6]}"
    ns, other = real_api.namespace(f"{prefix}-team"), real_api.namespace(f"{prefix}-other")
    hosts = [f"{prefix}-h{i}" for i in range(3)]
    w = Writer(real_api)
    for host, rack in zip(hosts, ("r1", "r1", "r2")):
        w.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": host, "labels": {BLOCK: "b1", RACK: rack, HOST: host}}})
    w.create(workload("stuck", ns, hosts=hosts[:2], unhealthy=[hosts[1]], conditions=admitted_conditions(ready=False)))
    w.create(workload("queued", ns, admitted_cq=None, conditions=[cond("QuotaReserved", "False", "Pending",
                                                                         message="insufficient quota for nvidia.com/gpu")]))
    w.create(workload("stuck", other, hosts=hosts[2:], conditions=admitted_conditions()))  # not the viewer's to read
    real_api.service_account(ns, "viewer", namespace_rules=READER_RULES)
    yield prefix, ns, hosts, w
    w.cleanup()


async def run_explain(real_api: RealCluster, kubeconfig: str, target: str,
                      capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any] | None, str]:
    p = argparse.ArgumentParser()
    explain.add_arguments(p)
    args = p.parse_args([target, "--kubeconfig", kubeconfig, "--output", "json", "--sync-timeout", "10",
                         "--topology-levels", f"{BLOCK},{RACK}"])
    capsys.readouterr()
    rc = await asyncio.to_thread(explain.run, args)
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else None), err


def placement(doc: dict[str, Any]) -> dict[str, Any]:
    return next(layer for layer in doc["layers"] if layer["name"] == "placement")


async def test_explain_as_a_user_who_can_read_one_namespace(real_api: RealCluster, team: Any, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    prefix, ns, hosts, _ = team
    kubeconfig = real_api.kubeconfig(tmp_path / "viewer", real_api.token(ns, "viewer"))

    rc, doc, err = await run_explain(real_api, kubeconfig, f"{ns}/stuck", capsys)
    assert rc == 0, err
    assert doc is not None and doc["verdict"]["layer"] == "placement" and doc["workload"]["namespace"] == ns
    layer = placement(doc)
    assert hosts[1] in layer["summary"]  # the unhealthy node, named
    # No right to read Nodes: the hosts are known, their block and rack are not; said on stderr.
    domains = layer["evidence"]["assignments"][0]["domains"]
    assert sorted(d["path"]["host"] for d in domains) == hosts[:2]
    assert {(d["path"]["block"], d["path"]["rack"]) for d in domains} == {("", "")}
    assert "nodes not read" in err

    rc, doc, err = await run_explain(real_api, kubeconfig, f"{ns}/queued", capsys)
    assert rc == 0, err
    assert doc is not None and doc["verdict"]["layer"] == "admission"
    assert "insufficient quota" in doc["verdict"]["summary"]

    # Another namespace's job is not readable: explained as unknown, not as this namespace's.
    rc, _, err = await run_explain(real_api, kubeconfig, f"{prefix}-other/stuck", capsys)
    assert rc == 1 and "no Kueue Workload" in err


async def test_explain_reads_only_the_nodes_of_the_assignment(real_api: RealCluster, team: Any, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Allowed to read Nodes, it fetches those of the assignment (by hostname label) and the
    unhealthy one (by name): the placement gets block and rack."""
    _, ns, hosts, _ = team
    real_api.service_account(ns, "viewer", namespace_rules=READER_RULES,
                             rules=[{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}])
    kubeconfig = real_api.kubeconfig(tmp_path / "viewer", real_api.token(ns, "viewer"))
    rc, doc, err = await run_explain(real_api, kubeconfig, f"{ns}/stuck", capsys)
    assert rc == 0, err
    assert doc is not None and "nodes not read" not in err
    layer = placement(doc)
    domains = {d["path"]["host"]: (d["path"]["block"], d["path"]["rack"]) for d in layer["evidence"]["assignments"][0]["domains"]}
    assert domains == {hosts[0]: ("b1", "r1"), hosts[1]: ("b1", "r1")}
    assert [(u["node"], u["path"]["rack"]) for u in layer["evidence"]["unhealthy_nodes"]] == [(hosts[1], "r1")]
