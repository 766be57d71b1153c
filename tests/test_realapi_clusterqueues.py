"""ClusterQueues and Cohorts on the real kube-apiserver, with Kueue's own CRDs (tests/fixtures/realapi/).

- A namespaced install whose ClusterRole lacks ``clusterqueues`` and ``cohorts``: those two
  sources are down as forbidden, every other source is served and its series exported; granted
  later, the queue is read and the Workload it holds is judged again.
- A malformed ClusterQueue the server stores (1.20 drops the CRD's CEL rules): skipped, counted in
  ``gangscope_parse_errors_total{source="clusterqueues"}``, named in the log; the others are read.
- A server whose Kueue CRDs serve only v1beta2 (Kueue 0.20 dropped v1beta1): every Kueue source
  is served at v1beta2 and its objects read.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml
from structlog.testing import capture_logs

from exporter.kube.resources import COLLECTOR_RESOURCES, QUEUE_POSITIONS
from collectors import started_collector
from kueue_objects import cluster_queue, cond, flavor_not_found, local_queue, sample, series, workload
from realapi import ROOT, RealCluster, Writer
from test_realapi_collector import scrape
from waiting import eventually

QUEUE_SOURCES = {"clusterqueues", "cohorts"}
INACTIVE = "ClusterQueue {} is inactive"


def namespaced_rules() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The namespaced install's rules (deploy/components/namespaced, generated from the code's
    resource table): its ClusterRole less clusterqueues and cohorts, and its Role."""
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "components" / "namespaced" / "rbac.yaml").read_text()))
    cluster = next(d for d in docs if d["kind"] == "ClusterRole")["rules"]
    role = next(d for d in docs if d["kind"] == "Role")["rules"]
    less = []
    for rule in cluster:
        resources = [r for r in rule["resources"] if r not in QUEUE_SOURCES]
        assert len(resources) == len(rule["resources"]) or rule["apiGroups"] == ["kueue.x-k8s.io"]
        less.append({**rule, "resources": resources})
    assert less != cluster
    return less, role


def objects(ns: str, cq: str) -> list[dict[str, Any]]:
    wl = workload("waits", ns, admitted_cq=None,
                  conditions=[cond("QuotaReserved", "False", "Suspended", message=INACTIVE.format(cq))])
    wl["spec"]["queueName"] = "lq"
    return [cluster_queue(cq, ("gone",), active=flavor_not_found("gone")), local_queue("lq", ns, cq), wl]


async def test_namespaced_install_without_cluster_queue_rights(real_api: RealCluster, tmp_path: Path) -> None:
    ns = real_api.namespace(f"cq-{uuid.uuid4().hex[:6]}")
    cq = f"{ns}-cq"
    cluster_rules, role_rules = namespaced_rules()
    real_api.service_account(ns, "collector", rules=cluster_rules, namespace_rules=role_rules)
    w = Writer(real_api)
    try:
        for obj in objects(ns, cq):
            w.create(obj)
        collector = await started_collector(real_api.kubeconfig(tmp_path / "kc", real_api.token(ns, "collector")),
                                            f"--namespaces={ns}")
        try:
            states = {n: st.state for n, st in collector.sources.sources.items()}
            assert {n for n, st in states.items() if st == "forbidden"} == QUEUE_SOURCES, states
            assert {n for n, st in states.items() if st == "synced"} == set(states) - QUEUE_SOURCES, states
            s = series(await scrape(collector.port))
            assert {r.source: s[sample("gangscope_source_up", source=r.source)] for r in COLLECTOR_RESOURCES
                    if r.source != QUEUE_POSITIONS.source} == {r.source: 0.0 if r.source in QUEUE_SOURCES else 1.0
                                                     for r in COLLECTOR_RESOURCES if r.source != QUEUE_POSITIONS.source}
            assert not any(k[0].startswith("gangscope_cluster_queue_") for k in s)
            # The Workload's series are served; without its queue, "inactive" is not known to be a
            # misconfiguration (it may be stopped): held, not paged.
            assert s[sample("gangscope_workload_pending_reason", namespace=ns, workload="waits", reason="Suspended",
                            category="policy")] == 1

            # Granted: the queue is read at the next discovery, and the Workload judged again.
            real_api.service_account(ns, "collector", rules=cluster_rules + [
                {"apiGroups": ["kueue.x-k8s.io"], "resources": sorted(QUEUE_SOURCES), "verbs": ["get", "list", "watch"]}],
                namespace_rules=role_rules)
            await eventually(lambda: collector.sources.sources["clusterqueues"].state == "synced", timeout=10)
            s = series(await scrape(collector.port))
            assert s[sample("gangscope_cluster_queue_active", cluster_queue=cq, reason="FlavorNotFound")] == 0
            assert s[sample("gangscope_workload_pending_reason", namespace=ns, workload="waits", reason="Suspended",
                            category="configuration")] == 1
            assert s[sample("gangscope_workload_stage", namespace=ns, workload="waits", stage="inadmissible")] == 1
        finally:
            await collector.stop()
    finally:
        w.cleanup()


async def test_malformed_cluster_queue_is_skipped_counted_and_logged(real_api: RealCluster, tmp_path: Path) -> None:
    prefix = f"cq-{uuid.uuid4().hex[:6]}"
    good = cluster_queue(f"{prefix}-good", ("tas",), reserved=8, used=8)
    bad = cluster_queue(f"{prefix}-bad", ("tas",))
    # Breaks the CRD's CEL rule "flavors must have the same number of resources as the
    # coveredResources" (clusterqueue_types.go:254), which 1.20 drops: the server stores it.
    bad["spec"]["resourceGroups"][0]["coveredResources"] = ["cpu", "nvidia.com/gpu"]
    w = Writer(real_api)
    try:
        w.create(good)
        stored = w.create(bad)
        assert stored["spec"]["resourceGroups"][0]["coveredResources"] == ["cpu", "nvidia.com/gpu"]
        with capture_logs() as logs:
            collector = await started_collector(real_api.kubeconfig(tmp_path / "kc"), "--resources=clusterqueues")
            try:
                await eventually(lambda: good["metadata"]["name"] in collector.store.cluster_queues, timeout=10)
                assert bad["metadata"]["name"] not in collector.store.cluster_queues
                s = series(await scrape(collector.port))
                assert s[sample("gangscope_parse_errors_total", source="clusterqueues")] >= 1
                assert s[sample("gangscope_source_up", source="clusterqueues")] == 1
                assert s[sample("gangscope_cluster_queue_used", cluster_queue=good["metadata"]["name"], flavor="tas",
                                resource="nvidia.com/gpu", topology="")] == 8
            finally:
                await collector.stop()
        named = [e for e in logs if e.get("event") == "object_parse_problems" and e.get("object") == bad["metadata"]["name"]]
        assert named and "coveredResources" in named[0]["detail"], logs
    finally:
        w.cleanup()


KUEUE_CRDS = ("kueue.x-k8s.io_workloads.yaml", "kueue.x-k8s.io_localqueues.yaml", "kueue.x-k8s.io_topologies.yaml",
              "kueue.x-k8s.io_resourceflavors.yaml", "kueue.x-k8s.io_clusterqueues.yaml", "kueue.x-k8s.io_cohorts.yaml")


async def test_a_server_that_serves_only_v1beta2(real_api: RealCluster, tmp_path: Path) -> None:
    """Kueue 0.20 serves kueue.x-k8s.io v1beta2 only: the second server of the suite (its own
    store) gets Kueue's CRDs with v1beta1 removed, and the collector reads every Kueue kind there."""
    plain = real_api.plain()
    real_api.install_crds(KUEUE_CRDS, admin=plain.admin, versions=("v1beta2",))
    doc = plain.admin.request("GET", "/apis/kueue.x-k8s.io")
    assert [v["version"] for v in doc["versions"]] == ["v1beta2"]
    ns = "only-v1beta2"
    try:
        plain.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    except Exception:  # noqa: BLE001 - the namespace of an earlier run of this session
        pass
    made = []
    try:
        for obj in objects(ns, "v2-cq"):
            made.append(plain.admin.ensure(obj))
            if obj.get("status"):
                plain.admin.apply_status(obj)
        kubeconfig = real_api.kubeconfig(tmp_path / "kc", port=plain.port)
        collector = await started_collector(kubeconfig, "--resources=workloads,localqueues,clusterqueues,cohorts,"
                                            "topologies,resourceflavors")
        try:
            versions = {n: (st.state, st.version) for n, st in collector.sources.sources.items()}
            assert versions == {n: ("synced", "v1beta2") for n in (
                "workloads", "localqueues", "clusterqueues", "cohorts", "topologies", "resourceflavors")}
            assert collector.store.cluster_queues["v2-cq"].inactive_reason == "FlavorNotFound"
            state = collector.store.workload(ns, "waits").state
            assert (state.stage, state.pending.category) == ("inadmissible", "configuration")
        finally:
            await collector.stop()
    finally:
        for obj in reversed(made):
            plain.admin.delete(obj, 0)
