"""The job around the gang: JobSets (restarts, RestartingJobSet, replicated jobs), TrainJobs
(jobsStatus, trainerStatus progress going stale) and LeaderWorkerSets (group readiness from pods),
joined to their Kueue Workload through the owner chain; exported series and explain's job layer."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from exporter.cluster import jobs as jb
from exporter.explain import job_layer
from exporter.health import SourceHealth
from test_gang_evidence import T0, Cluster, objects, pod, ts, workload


def jobset02() -> dict[str, Any]:
    """kueue#8101's JobSet; the printed List omits the namespace (the thread's objects are in default)."""
    [obj] = objects("jobset-02-kueue8101-trainjob-child-list.yaml")
    obj["metadata"].setdefault("namespace", "default")
    return obj


def test_real_jobsets_read_as_printed() -> None:
    [js1] = objects("jobset-01-kueue7649-suspended-child-no-conditions.yaml")
    rec = jb.parse_jobset(js1)
    assert (rec.restarts, rec.conditions, rec.errors, rec.running) == (0, (), [], True)
    assert [(c.name, c.active, c.suspended) for c in rec.children] == [("workers", 0, 1), ("driver", 0, 0)]
    rec2 = jb.parse_jobset(jobset02())
    assert rec2.owner_names == (("TrainJob", "test-tas"),) and rec2.owner_uids == ("0de9019f-0de6-485f-9e03-5850a4d6fc2e",)
    assert [(c.type, c.status, c.reason) for c in rec2.conditions] == [("Suspended", "False", "ResumeJobs")]


def restarting_jobset(restarts: int = 3, job_restarts: list[int] | None = None) -> dict[str, Any]:
    """A JobSet restarting under its failure policy, as the controller writes it
    (jobset pkg/controllers/failure_policy.go:244-258; status fields jobset_types.go:208-288). No
    real printed JobSet with restarts exists in the corpus (shared/fixtures/real/more/README.md):
    this is the real kueue#8101 JobSet with the status the types and the controller define."""
    obj = copy.deepcopy(jobset02())
    obj["status"]["restarts"] = restarts
    obj["status"]["restartsCountTowardsMax"] = restarts
    obj["status"]["replicatedJobsStatus"][0]["jobRestarts"] = job_restarts or [1, 0]
    obj["status"]["conditions"].append({
        "type": "RestartingJobSet", "status": "True", "reason": "FailurePolicy_restart-on-node-failure",
        "message": "jobset test-tas restarting: job test-tas-node-0 failed", "lastTransitionTime": "2025-12-05T19:30:00Z"})
    return obj


def test_jobset_restarts_are_a_counter_and_restarting_shows_in_explain() -> None:
    c = Cluster()
    wl = workload("trainjob-test-tas-2b8b5", "default", owner=("TrainJob", "test-tas", "0de9019f-0de6-485f-9e03-5850a4d6fc2e"))
    c.add("workloads", wl)
    c.add("jobsets", restarting_jobset())
    key = (("kind", "JobSet"), ("name", "test-tas"), ("namespace", "default"))
    assert c.series("gangscope_job_restarts_total") == {key: 4.0}  # 3 whole restarts + 1 Job restart
    assert c.series("gangscope_job_info") == {(*key[:2], key[2], ("workload", "trainjob-test-tas-2b8b5")): 1.0}
    assert c.series("gangscope_job_condition")[(("kind", "JobSet"), ("name", "test-tas"), ("namespace", "default"),
                                               ("reason", "FailurePolicy_restart-on-node-failure"), ("status", "True"),
                                               ("type", "RestartingJobSet"))] == 1
    assert c.series("gangscope_job_child_jobs")[(("child", "node"), ("kind", "JobSet"), ("name", "test-tas"),
                                                ("namespace", "default"), ("state", "active"))] == 1
    layer = job_layer(c.store.workloads[("default", "trainjob-test-tas-2b8b5")], c.store, c.jobs, c.now)
    assert layer["status"] == "blocking" and layer["evidence"]["problem"] == "restarting"
    assert layer["summary"].startswith("JobSet test-tas restarting (4 restarts; FailurePolicy_restart-on-node-failure: ")
    done = restarting_jobset(5)
    done["status"]["conditions"][-1].update(status="False", reason="JobsReady", message="all jobs are ready")
    c.add("jobsets", done, event="MODIFIED")
    assert c.series("gangscope_job_restarts_total")[key] == 6
    assert job_layer(c.store.workloads[("default", "trainjob-test-tas-2b8b5")], c.store, c.jobs, c.now)["summary"] == \
        "JobSet test-tas (6 restarts)"


def trainjob(progress: int | None, updated: float, *, name: str = "pytorch-distributed", suspended: bool = False,
             remaining: int = 3600, loss: str = "0.2347") -> dict[str, Any]:
    [obj] = objects("trainjob-02-kueue-pr7727-trainer-v2.1-jobsstatus.yaml")
    obj = copy.deepcopy(obj)
    if suspended:
        obj["status"]["conditions"][0].update(status="True", reason="Suspended")
    if progress is not None:
        # trainerStatus as the Trainer docs print it (trainjob-03; no real one exists): v2.2+ with TrainJobStatus
        obj["status"]["trainerStatus"] = {"progressPercentage": progress, "estimatedRemainingSeconds": remaining,
                                          "metrics": [{"name": "loss", "value": loss}], "lastUpdatedTime": ts(updated)}
    return obj


def test_trainjob_progress_series_and_stale_progress() -> None:
    c = Cluster(now=T0)
    c.jobs.stale_after = 1200  # --progress-stale-after
    c.add("workloads", workload("trainjob-pytorch-distributed-abc12", "default",
                                owner=("TrainJob", "pytorch-distributed", "a8dc44ff-cb98-46cd-aa26-6b81bd9f8074")))
    c.add("trainjobs", trainjob(45, T0 - 60))
    key = (("kind", "TrainJob"), ("name", "pytorch-distributed"), ("namespace", "default"))
    assert c.series("gangscope_job_progress_ratio") == {key: 0.45}
    assert c.series("gangscope_job_progress_updated_timestamp_seconds") == {key: T0 - 60}
    assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {key: T0 - 60}
    assert c.series("gangscope_job_progress_remaining_seconds") == {key: 3600}
    assert c.series("gangscope_job_child_jobs")[(("child", "node"), *key[:2], key[2], ("state", "ready"))] == 1
    # the trainer keeps reporting 45%: the last update moves, the change does not
    c.now = T0 + 1500
    c.add("trainjobs", trainjob(45, T0 + 1440), event="MODIFIED")
    assert c.series("gangscope_job_progress_updated_timestamp_seconds") == {key: T0 + 1440}
    assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {key: T0 - 60}
    wl = c.store.workloads[("default", "trainjob-pytorch-distributed-abc12")]
    layer = job_layer(wl, c.store, c.jobs, c.now)
    assert layer["status"] == "blocking" and layer["evidence"]["problem"] == "progress_stale"
    assert layer["summary"] == ("TrainJob pytorch-distributed progress stale for 26m (45% since 2026-08-20T09:59:00Z, "
                                "last report 2026-08-20T10:24:00Z)")
    c.add("trainjobs", trainjob(46, T0 + 1490), event="MODIFIED")
    assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {key: T0 + 1490}
    assert job_layer(wl, c.store, c.jobs, c.now)["summary"] == "TrainJob pytorch-distributed (46% done)"
    c.now = T0 + 9000
    c.add("trainjobs", trainjob(46, T0 + 1490, suspended=True), event="MODIFIED")
    assert job_layer(wl, c.store, c.jobs, c.now)["status"] == "ok"  # suspended is not a hang


def test_a_healthy_12_day_trainjob_keeps_progressing_between_percents() -> None:
    """12 days are 10,368 s per percent: the integer percentage stands still for almost 3 hours
    while each report lowers estimatedRemainingSeconds (and moves the loss). Either counts as
    progress, so the changed timestamp follows the reports."""
    c = Cluster(now=T0)
    c.add("trainjobs", trainjob(7, T0, remaining=965_000, loss="1.91"))
    key = (("kind", "TrainJob"), ("name", "pytorch-distributed"), ("namespace", "default"))
    for i in range(1, 7):  # a report every 10 minutes, still 7%
        c.now = T0 + 600 * i
        c.add("trainjobs", trainjob(7, c.now, remaining=965_000 - 600 * i, loss="1.91"), event="MODIFIED")
        assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {key: c.now}
    c.now += 600  # the estimate holds, the loss moves
    c.add("trainjobs", trainjob(7, c.now, remaining=961_400, loss="1.89"), event="MODIFIED")
    assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {key: c.now}
    moved = c.now
    c.now += 600  # the same report again: no progress
    c.add("trainjobs", trainjob(7, c.now, remaining=961_400, loss="1.89"), event="MODIFIED")
    assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {key: moved}


def metrics_only_trainjob(updated: float, loss: str, tokens: str = "41000") -> dict[str, Any]:
    """A TrainJob whose training process reports metrics and nothing else: every trainerStatus
    field but lastUpdatedTime is optional (kubeflow/trainer 8c0f5059 trainjob_types.go:565-592),
    and the status server copies what is posted (pkg/statusserver/server.go:252-258)."""
    obj = trainjob(None, updated)
    obj["status"]["trainerStatus"] = {"metrics": [{"name": "loss", "value": loss}, {"name": "tokens_per_second", "value": tokens}],
                                      "lastUpdatedTime": ts(updated)}
    return obj


def test_a_trainjob_reporting_only_metrics_is_judged_stale_by_the_same_rule() -> None:
    c = Cluster(now=T0)
    c.jobs.stale_after = 1800
    c.add("workloads", workload("trainjob-pytorch-distributed-abc12", "default",
                                owner=("TrainJob", "pytorch-distributed", "a8dc44ff-cb98-46cd-aa26-6b81bd9f8074")))
    c.add("trainjobs", metrics_only_trainjob(T0 - 60, "2.31"))
    key = (("kind", "TrainJob"), ("name", "pytorch-distributed"), ("namespace", "default"))
    assert c.series("gangscope_job_progress_ratio") == {}
    assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {key: T0 - 60}
    wl = c.store.workloads[("default", "trainjob-pytorch-distributed-abc12")]
    assert job_layer(wl, c.store, c.jobs, c.now)["status"] == "ok"  # a young report
    c.now = T0 + 600  # the loss moves: progress
    c.add("trainjobs", metrics_only_trainjob(c.now, "2.29"), event="MODIFIED")
    assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {key: T0 + 600}
    # hung: the process posts nothing more; its last tokens per second stay in the object
    c.now = T0 + 600 + 2400
    layer = job_layer(wl, c.store, c.jobs, c.now)
    assert layer["status"] == "blocking" and layer["evidence"]["problem"] == "progress_stale"
    assert layer["summary"] == ("TrainJob pytorch-distributed progress stale for 40m "
                                "(loss=2.29, tokens_per_second=41000 since 2026-08-20T10:10:00Z)")
    # the series the rules read is the same clock
    assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {key: T0 + 600}


def test_a_trainjob_that_has_not_reported_is_not_stale() -> None:
    """Trainer writes no trainerStatus before the first report: a young job has no changed
    timestamp, and neither explain nor the rules can call it hung."""
    c = Cluster(now=T0 + 86400)
    c.jobs.stale_after = 1800
    c.add("workloads", workload("trainjob-pytorch-distributed-abc12", "default",
                                owner=("TrainJob", "pytorch-distributed", "a8dc44ff-cb98-46cd-aa26-6b81bd9f8074")))
    c.add("trainjobs", trainjob(None, T0))
    assert c.series("gangscope_job_progress_changed_timestamp_seconds") == {}
    wl = c.store.workloads[("default", "trainjob-pytorch-distributed-abc12")]
    assert job_layer(wl, c.store, c.jobs, c.now)["status"] == "ok"


def test_a_restarting_jobset_is_named_before_its_trainjobs_stale_progress() -> None:
    """A TrainJob's progress stands still while the JobSet it owns restarts: explain leads with the
    restart (its cause), whichever job the owner chain lists first."""
    c = Cluster(now=T0 + 3600)
    c.jobs.stale_after = 1800
    uid = "0de9019f-0de6-485f-9e03-5850a4d6fc2e"
    c.add("workloads", workload("trainjob-test-tas-2b8b5", "default", owner=("TrainJob", "test-tas", uid)))
    tj = trainjob(45, T0)
    tj["metadata"].update(name="test-tas", namespace="default", uid=uid)
    c.add("trainjobs", tj)
    c.add("jobsets", restarting_jobset())
    layer = job_layer(c.store.workloads[("default", "trainjob-test-tas-2b8b5")], c.store, c.jobs, c.now)
    assert [j["kind"] for j in layer["evidence"]["jobs"]] == ["TrainJob", "JobSet"]
    assert layer["evidence"]["problem"] == "restarting"
    restart, stale = layer["summary"].split("); ")
    assert restart.startswith("JobSet test-tas restarting (4 restarts; FailurePolicy_restart-on-node-failure")
    assert stale == "TrainJob test-tas progress stale for 60m (45% since 2026-08-20T10:00:00Z)"


def test_jobset_in_place_restarts_count() -> None:
    """InPlaceRestart: currentInPlaceRestartAttempt is the attempt all pods reached, 0 at creation
    (jobset 08dfbdfd pkg/controllers/in_place_restart.go:78-90)."""
    obj = jobset02()
    obj["status"]["currentInPlaceRestartAttempt"] = 2
    assert jb.parse_jobset(obj).restarts == 2
    obj["status"]["restarts"] = 1
    assert jb.parse_jobset(obj).restarts == 3


def test_lws_under_kueue_joins_by_the_job_uid_label() -> None:
    """Kueue makes a LeaderWorkerSet group's Workload with the job-uid label and a non-controller
    owner reference (leaderworkerset_reconciler.go:350, 365)."""
    c = Cluster()
    wl = workload("leaderworkerset-llama-70b-0-x", "serving", owner=("LeaderWorkerSet", "llama-70b", "lws-uid"))
    wl["metadata"]["ownerReferences"][0]["controller"] = False
    wl["metadata"]["labels"] = {"kueue.x-k8s.io/job-uid": "lws-uid"}
    c.add("workloads", wl)
    c.add("leaderworkersets", lws(2))
    views = c.jobs.jobs_of(c.store.workloads[("serving", "leaderworkerset-llama-70b-0-x")])
    assert [(v.record.kind, v.record.name, v.workloads) for v in views] == [
        ("LeaderWorkerSet", "llama-70b", ["leaderworkerset-llama-70b-0-x"])]


def test_trainjobs_without_trainer_status_and_bad_values() -> None:
    [v20] = objects("trainjob-01-kueue-pr7727-trainer-v2.0-no-jobsstatus.yaml")
    rec = jb.parse_trainjob(v20)
    assert (rec.progress, rec.children, rec.errors) == (None, (), [])
    bad = trainjob(140, T0)
    bad["status"]["trainerStatus"]["lastUpdatedTime"] = "yesterday"
    rec = jb.parse_trainjob(bad)
    assert rec.progress is None and len(rec.errors) == 2


def lws(ready: int) -> dict[str, Any]:
    """A LeaderWorkerSet as its types define it (lws leaderworkerset_types.go:124-173, 369-391; no
    real printed one with a status exists in the corpus)."""
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "llama-70b", "namespace": "serving", "uid": "lws-uid"},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": {"spec": {"containers": []}}}},
            "status": {"readyReplicas": ready, "replicas": 2,
                       "conditions": [{"type": "Available", "status": "True", "reason": "AllGroupsReady", "message": "",
                                       "lastTransitionTime": ts(T0)}]}}


def lws_pods(group: int, ready: int, size: int = 4) -> list[dict[str, Any]]:
    labels = {"leaderworkerset.sigs.k8s.io/name": "llama-70b", "leaderworkerset.sigs.k8s.io/group-index": str(group)}
    return [pod(f"llama-70b-{group}-{i}", "serving", labels=labels, annotations={"leaderworkerset.sigs.k8s.io/size": str(size)},
                node=f"g{group}-n{i}", ready=i < ready) for i in range(size)]


def test_lws_groups_are_ready_from_their_pods_not_the_leader_alone() -> None:
    c = Cluster()
    c.add("workloads", workload("leaderworkerset-llama-70b-0-x", "serving", owner=("LeaderWorkerSet", "llama-70b", "lws-uid")))
    c.add("leaderworkersets", lws(2))
    c.list_pods("pods_lws", *lws_pods(0, 4), *lws_pods(1, 1))  # group 1: the leader ready, 3 workers not
    key = (("kind", "LeaderWorkerSet"), ("name", "llama-70b"), ("namespace", "serving"))
    groups = {dict(k)["state"]: v for k, v in c.series("gangscope_job_groups").items()}
    assert groups == {"ready": 1, "not_ready": 1, "desired": 2}
    assert c.series("gangscope_job_groups_reported_ready") == {key: 2}
    layer = job_layer(c.store.workloads[("serving", "leaderworkerset-llama-70b-0-x")], c.store, c.jobs, c.now)
    assert layer["status"] == "blocking"
    assert layer["summary"] == ("LeaderWorkerSet llama-70b: 1 of 2 groups ready from their pods, its controller reports 2 "
                                "(group 1 1/4 pods ready)")
    c.add("pods_lws", *lws_pods(1, 4), event="MODIFIED")
    assert {dict(k)["state"]: v for k, v in c.series("gangscope_job_groups").items()}["ready"] == 2


def test_trainjob_pods_reach_their_workload_through_the_jobset() -> None:
    """Without Kueue's workload annotation on the pods (TopologyAwareScheduling off), a TrainJob's
    pods join its Workload by the jobset-uid label and the JobSet's owner (the TrainJob)."""
    c = Cluster()
    owner = ("TrainJob", "test-tas", "0de9019f-0de6-485f-9e03-5850a4d6fc2e")
    c.add("workloads", workload("trainjob-test-tas-2b8b5", "default", owner=owner, count=2))
    c.add("jobsets", jobset02())
    labels = {"jobset.sigs.k8s.io/jobset-name": "test-tas", "jobset.sigs.k8s.io/jobset-uid": "79e4c170-5016-43e0-8aec-f1a9bf638a37"}
    c.list_pods("pods_jobset", pod("test-tas-node-0-0", "default", labels=labels),
                pod("test-tas-node-0-1", "default", labels=labels, node=None, phase="Pending", ready=False))
    wl = c.store.workloads[("default", "trainjob-test-tas-2b8b5")]
    assert [p.name for p in sorted(c.gangs.workload_pods(wl), key=lambda p: p.name)] == ["test-tas-node-0-0", "test-tas-node-0-1"]
    assert wl.stage == "assembling"  # no PodsReady, no gang: 1 of 2 pods running
    c.add("pods_jobset", pod("test-tas-node-0-1", "default", labels=labels, rv="2"), event="MODIFIED")
    assert c.store.workloads[wl.key].stage == "running"


@pytest.mark.parametrize("source", sorted(jb.PARSERS))
def test_malformed_jobs_are_counted(source: str) -> None:
    c = Cluster()
    h = c.h[source]
    h.health = SourceHealth(source, c.expo)
    h.replace([{"metadata": {"name": "x", "namespace": "n"}, "status": {"conditions": "nope", "restarts": "3"}},
               {"metadata": {}}, 5])
    assert h.health.parse_errors >= 3 and h.health.objects == 1


def test_each_job_source_counts_only_its_own_jobs() -> None:
    c = Cluster()
    jobsets, trainjobs = c.h["jobsets"], c.h["trainjobs"]
    jobsets.health, trainjobs.health = SourceHealth("jobsets", c.expo), SourceHealth("trainjobs", c.expo)
    js = jobset02()
    jobsets.replace([js, {**js, "metadata": {**js["metadata"], "name": "second", "uid": "u-second"}}])
    trainjobs.apply("ADDED", trainjob(None, T0))
    assert (jobsets.health.objects, trainjobs.health.objects) == (2, 1)
    jobsets.apply("MODIFIED", js)
    jobsets.apply("DELETED", {**js, "metadata": {**js["metadata"], "name": "second", "uid": "u-second"}})
    assert (jobsets.health.objects, trainjobs.health.objects) == (1, 1)
    jobsets.replace([])
    assert (jobsets.health.objects, trainjobs.health.objects) == (0, 1)
