"""Every kind the collector reads beyond Kueue and the older gang APIs, served by its real upstream
CRD on the real kube-apiserver (tests/fixtures/realapi/: KAI Scheduler's PodGroup, JobSet,
Kubeflow Trainer's TrainJob, LeaderWorkerSet; the native CompositePodGroup as a stand-in), one
object of each as printed by a real cluster or upstream's own sample, its status written through
``/status`` as the controllers write it. The server validates and prunes each against its CRD's
structural schema, so a field the collector reads that the CRD does not carry would be gone here,
and the series below would miss it.
"""

from __future__ import annotations

import copy
import datetime
import uuid
from pathlib import Path
from typing import Any

import yaml

from exporter.kube.resources import JOBSETS, KAI_PODGROUPS, LEADERWORKERSETS, NATIVE_COMPOSITE_PODGROUPS, TRAINJOBS
from collectors import started_collector
from kueue_objects import admitted_conditions, sample, series, workload
from realapi import RealCluster, Writer
from test_realapi_collector import collector_kubeconfig, scrape
from waiting import eventually

REAL = Path(__file__).resolve().parent / "fixtures" / "gangs" / "real"
KINDS = (KAI_PODGROUPS, JOBSETS, TRAINJOBS, LEADERWORKERSETS, NATIVE_COMPOSITE_PODGROUPS)


def real(name: str) -> dict[str, Any]:
    """The first object of a real printed file (a List's first item)."""
    doc = next(d for d in yaml.safe_load_all((REAL / name).read_text()) if d)
    return copy.deepcopy(doc["items"][0] if doc.get("kind") == "List" else doc)


def placed(obj: dict[str, Any], ns: str) -> dict[str, Any]:
    """``obj`` in namespace ``ns``, without what the server assigns and what kubectl added."""
    meta = {k: v for k, v in obj["metadata"].items()
            if k not in ("uid", "resourceVersion", "creationTimestamp", "generation", "annotations", "managedFields")}
    return {**obj, "metadata": {**meta, "namespace": ns}}


def epoch(rfc3339: str) -> float:
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def lws(ns: str) -> dict[str, Any]:
    """kubernetes-sigs/lws config/samples/leaderworkerset_v1_leaderworkerset.yaml (@060ab4da, last
    changed 7c2ee144) with one group of four ready, as the controller's status says
    (api/leaderworkerset/v1/leaderworkerset_types.go:369-391; no real printed status in the corpus)."""
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "leaderworkerset-sample", "namespace": ns, "labels": {
                "app.kubernetes.io/name": "leaderworkerset", "app.kubernetes.io/instance": "leaderworkerset-sample",
                "app.kubernetes.io/part-of": "lws", "app.kubernetes.io/managed-by": "kustomize",
                "app.kubernetes.io/created-by": "lws"}},
            "spec": {"rolloutStrategy": {"rollingUpdateConfiguration": {"maxUnavailable": 1}, "type": "RollingUpdate"},
                     "replicas": 3,
                     "leaderWorkerTemplate": {"size": 4, "restartPolicy": "RecreateGroupOnPodRestart", "workerTemplate": {
                         "spec": {"containers": [{"name": "nginx", "image": "nginxinc/nginx-unprivileged:1.27",
                                                  "resources": {"limits": {"cpu": "100m"}, "requests": {"cpu": "50m"}},
                                                  "ports": [{"containerPort": 8080}]}]}}}},
            "status": {"replicas": 3, "readyReplicas": 1, "updatedReplicas": 3,
                       "hpaPodSelector": "leaderworkerset.sigs.k8s.io/name=leaderworkerset-sample,"
                                         "leaderworkerset.sigs.k8s.io/worker-index=0",
                       "conditions": [{"type": "Progressing", "status": "True", "reason": "GroupsProgressing",
                                       "message": "Replicas are progressing", "lastTransitionTime": "2026-08-20T10:00:00Z"}]}}


def composite(ns: str) -> dict[str, Any]:
    """A 1.37 CompositePodGroup in the shape of kubernetes' v1alpha3 golden
    (staging/src/k8s.io/api/testdata/HEAD/scheduling.k8s.io.v1alpha3.CompositePodGroup.yaml @0c7f6c65)
    with real values: two child groups of a Workload's composite template, scheduled."""
    return {"apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
            "metadata": {"name": "llm-train-replicas", "namespace": ns},
            "spec": {"workloadRef": {"workloadName": "llm-train", "templateName": "replicas"},
                     "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                     "schedulingConstraints": {"topology": [{"key": "cloud.provider.com/topology-block"}]},
                     "disruptionMode": {"all": {}}, "priority": 1000},
            "status": {"conditions": [{"type": "CompositePodGroupInitiallyScheduled", "status": "True",
                                       "reason": "Scheduled", "message": "", "observedGeneration": 1,
                                       "lastTransitionTime": "2026-08-20T10:00:05Z"}]}}


def trainjob(ns: str) -> dict[str, Any]:
    """Kueue PR 7727's TrainJob (Trainer v2.1, jobsStatus) with the trainerStatus of Trainer 2.2 as
    its docs print it (trainjob-03: no real one exists)."""
    obj = placed(real("trainjob-02-kueue-pr7727-trainer-v2.1-jobsstatus.yaml"), ns)
    obj["status"]["trainerStatus"] = {"progressPercentage": 45, "estimatedRemainingSeconds": 3600,
                                      "metrics": [{"name": "loss", "value": "0.2347"}],
                                      "lastUpdatedTime": "2026-08-20T10:00:00Z"}
    return obj


async def test_every_kind_served_and_read_as_written(real_api: RealCluster, tmp_path: Path) -> None:
    ns = real_api.namespace(f"k{uuid.uuid4().hex[:6]}")
    kai = placed(real("kai-01-podgroup-gb200-eks-unschedulable-list.yaml"), ns)
    jobset = placed(real("jobset-02-kueue8101-trainjob-child-list.yaml"), ns)
    writers = {name: Writer(real_api, manager) for name, manager in (
        ("kai", "kai-scheduler"), ("jobset", "jobset-controller"), ("trainer", "trainer-controller"),
        ("lws", "lws-controller"), ("native", "kube-scheduler"), ("kueue", "kueue-admission"))}
    try:
        stored_kai = writers["kai"].create(kai)
        writers["jobset"].create(jobset)
        tj = writers["trainer"].create(trainjob(ns))
        writers["lws"].create(lws(ns))
        writers["native"].create(composite(ns))
        # The Workload Kueue made for the TrainJob: its controller owner is the TrainJob (by the uid
        # this server gave it), which is how the job layer joins them.
        wl = workload("trainjob-pytorch-distributed-3e9c1", ns, hosts=[], conditions=admitted_conditions())
        wl["metadata"]["ownerReferences"] = [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                              "name": "pytorch-distributed", "uid": tj["metadata"]["uid"],
                                              "controller": True, "blockOwnerDeletion": True}]
        writers["kueue"].create(wl)
        # Status went through /status: the real server kept what the CRD's schema has (the KAI
        # group's reasons[] and resourcesStatus, the TrainJob's trainerStatus) and dropped nothing.
        assert stored_kai["status"] == kai["status"]

        collector = await started_collector(collector_kubeconfig(real_api, tmp_path / "kc", real_api.port))
        try:
            await eventually(lambda: collector.sources.ready()[0], timeout=15)
            s = series(await scrape(collector.port))
            for r in KINDS:
                assert s[sample("gangscope_source_up", source=r.source)] == 1, r.source
                assert s[sample("gangscope_parse_errors_total", source=r.source)] == 0, r.source

            pg = {"namespace": ns, "podgroup": "gang-test-group", "api": "kai"}
            assert s[sample("gangscope_podgroup_phase", **pg, phase="Unschedulable")] == 1
            assert s[sample("gangscope_podgroup_min_member", **pg)] == 2
            assert s[sample("gangscope_podgroup_phase_timestamp_seconds", **pg)] == epoch("2026-08-09T01:22:39Z")
            assert s[sample("gangscope_podgroup_info", **pg, queue="default-queue", parent="", required_topology="",
                            preferred_topology="", composite="0")] == 1

            cpg = {"namespace": ns, "podgroup": "llm-train-replicas", "api": "native"}
            assert s[sample("gangscope_podgroup_phase", **cpg, phase="Scheduled")] == 1
            assert s[sample("gangscope_podgroup_min_member", **cpg)] == 2
            assert s[sample("gangscope_podgroup_info", **cpg, queue="", parent="",
                            required_topology="cloud.provider.com/topology-block", preferred_topology="", composite="1")] == 1

            js = {"namespace": ns, "kind": "JobSet", "name": "test-tas"}
            assert s[sample("gangscope_job_info", **js, workload="")] == 1
            assert s[sample("gangscope_job_condition", **js, type="Suspended", status="False", reason="ResumeJobs")] == 1
            assert s[sample("gangscope_job_restarts_total", **js)] == 0
            assert s[sample("gangscope_job_child_jobs", **js, child="node", state="active")] == 1

            tjk = {"namespace": ns, "kind": "TrainJob", "name": "pytorch-distributed"}
            assert s[sample("gangscope_job_info", **tjk, workload="trainjob-pytorch-distributed-3e9c1")] == 1
            assert s[sample("gangscope_job_condition", **tjk, type="Suspended", status="False", reason="Resumed")] == 1
            assert s[sample("gangscope_job_child_jobs", **tjk, child="node", state="ready")] == 1
            assert s[sample("gangscope_job_progress_ratio", **tjk)] == 0.45
            assert s[sample("gangscope_job_progress_remaining_seconds", **tjk)] == 3600
            assert s[sample("gangscope_job_progress_updated_timestamp_seconds", **tjk)] == epoch("2026-08-20T10:00:00Z")

            lw = {"namespace": ns, "kind": "LeaderWorkerSet", "name": "leaderworkerset-sample"}
            assert s[sample("gangscope_job_groups_reported_ready", **lw)] == 1
            assert s[sample("gangscope_job_groups", **lw, state="desired")] == 3
            assert s[sample("gangscope_job_groups", **lw, state="ready")] == 0  # no pods here: none is ready
        finally:
            await collector.stop()
    finally:
        for w in writers.values():
            w.cleanup()
