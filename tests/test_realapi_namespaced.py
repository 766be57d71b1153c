"""A namespaced install against the real RBAC authorizer: the collector's ServiceAccount bound only
by Roles in two namespaces, with exactly the rules the Helm chart renders for
``rbac.namespaced=true, collector.namespaces=[a, b]`` (the same rules as the kustomize component
``deploy/components/namespaced``), runs with the ``--namespaces`` flag the chart gives it.

Every namespaced source lists and watches each of the two namespaces and is served; objects in a
third namespace never appear. The cluster-scoped sources (Nodes, Topologies, ResourceFlavors) are
down as forbidden while the chart's small ClusterRole is not bound, everything else served; bound,
they come up at the next discovery. ``explain`` with the same token reads a Workload of namespace
a, and not one of the third namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import structlog

from exporter import explain
from exporter.kube.resources import COLLECTOR_RESOURCES, QUEUE_POSITIONS
from collectors import started_collector
from kueue_objects import BLOCK, HOST, RACK, admitted_conditions, sample, series
from kueue_objects import workload as kueue_workload
from manifests import with_components
from realapi import RealCluster, Writer
from test_helm import render
from test_realapi_collector import scrape
from test_realapi_kinds import placed, real
from waiting import eventually

NAMESPACED = {r.source for r in COLLECTOR_RESOURCES if r.namespaced and r.source != QUEUE_POSITIONS.source}
CLUSTER_SCOPED = {r.source for r in COLLECTOR_RESOURCES if not r.namespaced and r.source != QUEUE_POSITIONS.source}


@pytest.fixture(autouse=True)
def _reset_logging() -> Any:
    """explain.run configures structlog on the (captured) stderr; later tests must not log into a closed file."""
    yield
    structlog.reset_defaults()


def rules(objs: list[dict[str, Any]], kind: str) -> list[list[dict[str, Any]]]:
    return [o["rules"] for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith("gangscope-collector")]


def collector_flag(objs: list[dict[str, Any]], flag: str) -> str:
    """The value of ``flag`` among the collector Deployment's container arguments."""
    deploy = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("collector"))
    [arg] = [a for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith(f"{flag}=")]
    return str(arg.split("=", 1)[1])


async def test_collector_with_roles_in_two_namespaces(real_api: RealCluster, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"n{uuid.uuid4().hex[:6]}"
    a, b, other, home = (real_api.namespace(f"{prefix}-{n}") for n in ("a", "b", "other", "gs"))
    objs = render({"rbac": {"namespaced": True}, "collector": {"namespaces": [a, b]}}, name=prefix, namespace=home)["objects"]
    # The chart's Role is the kustomize component's Role, rule for rule.
    component = with_components(tmp_path, "namespaced")
    assert rules(objs, "Role") == [rules(component, "Role")[0]] * 2
    assert {o["metadata"]["namespace"] for o in objs if o["kind"] in ("Role", "RoleBinding")} == {a, b}
    cluster_binding = next(o for o in objs if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"].endswith("collector-cluster"))
    for obj in objs:  # the collector's RBAC as rendered, less the binding of its ClusterRole (bound below)
        if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole") and "collector" in obj["metadata"]["name"]:
            real_api.admin.ensure(obj)
    sa = next(o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"].endswith("collector"))["metadata"]
    token = real_api.token(home, sa["name"])

    w = Writer(real_api)
    hosts = [f"{prefix}-h{i}" for i in range(2)]
    try:
        for host in hosts:
            w.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": host, "labels": {BLOCK: "b1", RACK: "r1", HOST: host}}})
        for ns in (a, b, other):
            w.create(kueue_workload("train", ns, hosts=hosts, conditions=admitted_conditions()))
            w.create(placed(real("kai-01-podgroup-gb200-eks-unschedulable-list.yaml"), ns))
            w.create(placed(real("jobset-01-kueue7649-suspended-child-no-conditions.yaml"), ns))

        namespaces = collector_flag(objs, "--namespaces")
        assert namespaces == f"{a},{b}"
        collector = await started_collector(real_api.kubeconfig(tmp_path / "kc", token), f"--namespaces={namespaces}")
        try:
            await eventually(lambda: collector.sources.ready()[0], timeout=15)
            states = {n: st.state for n, st in collector.sources.sources.items()}
            assert {n for n, st in states.items() if st == "synced"} == NAMESPACED, states
            assert {n for n, st in states.items() if st == "forbidden"} == CLUSTER_SCOPED, states
            s = series(await scrape(collector.port))
            assert {r.source: s[sample("gangscope_source_up", source=r.source)] for r in COLLECTOR_RESOURCES} == {
                r.source: 1.0 if r.source in NAMESPACED else 0.0 for r in COLLECTOR_RESOURCES}
            seen = {(dict(k[1])["namespace"], dict(k[1])[label]) for k in s for family, label in (
                ("gangscope_workload_info", "workload"), ("gangscope_podgroup_info", "podgroup"), ("gangscope_job_info", "name"))
                if k[0] == family and dict(k[1])["namespace"].startswith(prefix)}
            assert seen == {(ns, name) for ns in (a, b) for name in ("train", "gang-test-group", "sleep-job-x5ffx")}
            assert collector.store.workload(other, "train") is None

            # The chart's ClusterRole bound: the cluster-scoped sources come up, nothing restarted.
            real_api.admin.ensure(cluster_binding)
            await eventually(lambda: all(collector.sources.sources[n].state == "synced" for n in CLUSTER_SCOPED), timeout=10)
            s = series(await scrape(collector.port))
            assert all(s[sample("gangscope_source_up", source=n)] == 1 for n in CLUSTER_SCOPED | NAMESPACED)
            assert s[sample("gangscope_workload_topology_pods", namespace=a, workload="train", podset="main",
                            host=hosts[0])] == 1
        finally:
            await collector.stop()

        # explain as the same ServiceAccount: namespace a's Workload, with its Nodes (the ClusterRole).
        parser = argparse.ArgumentParser()
        explain.add_arguments(parser)
        kubeconfig = real_api.kubeconfig(tmp_path / "kc-explain", token)
        for target, want in ((f"{a}/train", 0), (f"{other}/train", 1)):
            args = parser.parse_args([target, "--kubeconfig", kubeconfig, "--output", "json", "--sync-timeout", "10",
                                      "--topology-levels", f"{BLOCK},{RACK}"])
            capsys.readouterr()
            rc = await asyncio.to_thread(explain.run, args)
            out, err = capsys.readouterr()
            assert rc == want, err
            if want == 0:
                doc = json.loads(out)
                assert doc["workload"]["namespace"] == a and "nodes not read" not in err
                placement = next(layer for layer in doc["layers"] if layer["name"] == "placement")
                assert {(d["path"]["host"], d["path"]["rack"]) for d in placement["evidence"]["assignments"][0]["domains"]} == {
                    (h, "r1") for h in hosts}
            else:
                assert "no Kueue Workload" in err
    finally:
        w.cleanup()
        for obj in objs:
            if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding") \
                    and "collector" in obj["metadata"]["name"]:
                real_api.admin.delete(obj)
