"""The training layer in the collector: TrainJob status.trainerStatus.metrics as series (one per
metric name per job), bad entries skipped and counted while the job's other series stay."""

from __future__ import annotations

import copy
import math

from exporter.cluster import jobs as jb
from exporter.cluster import training
from exporter.health import SourceHealth
from test_gang_evidence import T0, Cluster, workload
from test_jobs import trainjob

KEY = (("kind", "TrainJob"), ("name", "pytorch-distributed"), ("namespace", "default"))


def metric_key(name: str) -> tuple[tuple[str, str], ...]:
    return (KEY[0], ("metric", name), *KEY[1:])


def with_metrics(metrics: object) -> dict:
    obj = copy.deepcopy(trainjob(45, T0))
    obj["status"]["trainerStatus"]["metrics"] = metrics
    return obj


def test_upstream_doc_metrics_become_one_series_each() -> None:
    # The proposal's sample (kubeflow/trainer 6cf1d214 proposals/2779-trainjob-progress/README.md:140-165,
    # fixtures/real/more/trainjob-03): string values, five names.
    doc = [{"name": "loss", "value": "0.2347"}, {"name": "eval_loss", "value": "0.2451"},
           {"name": "accuracy", "value": "0.9876"}, {"name": "currentEpoch", "value": "2"},
           {"name": "totalEpochs", "value": "5"}]
    c = Cluster(now=T0)
    c.add("workloads", workload("trainjob-pytorch-distributed-abc12", "default",
                                owner=("TrainJob", "pytorch-distributed", "a8dc44ff-cb98-46cd-aa26-6b81bd9f8074")))
    c.add("trainjobs", with_metrics(doc))
    assert c.series("gangscope_job_trainer_metric") == {
        metric_key("loss"): 0.2347, metric_key("eval_loss"): 0.2451, metric_key("accuracy"): 0.9876,
        metric_key("currentEpoch"): 2.0, metric_key("totalEpochs"): 5.0}
    text = c.expo.render(openmetrics=False).decode()
    assert 'gangscope_job_trainer_metric{namespace="default",kind="TrainJob",name="pytorch-distributed",metric="loss"} 0.2347\n' in text
    # the report changes: the series follow, a metric no longer reported goes
    c.add("trainjobs", with_metrics([{"name": "loss", "value": "0.2"}, {"name": "tokens_per_second", "value": "51234.5"}]),
          event="MODIFIED")
    assert c.series("gangscope_job_trainer_metric") == {metric_key("loss"): 0.2, metric_key("tokens_per_second"): 51234.5}
    c.add("trainjobs", with_metrics(None), event="MODIFIED")
    assert c.series("gangscope_job_trainer_metric") == {}
    assert c.series("gangscope_job_progress_ratio") == {KEY: 0.45}


def test_bad_entries_are_skipped_counted_and_named() -> None:
    problems: list[str] = []
    got = training.parse_trainer_metrics({"metrics": [
        {"name": "loss", "value": "0.5"},
        {"name": "phase", "value": "warmup"},       # not a number
        {"name": "", "value": "1"},                 # no name
        {"name": "loss", "value": "0.7"},           # a second loss
        {"name": "x" * 65, "value": "1"},           # above the API's 64 characters
        {"name": "inf", "value": "inf"},
        {"name": "nan", "value": "NaN"},
        {"name": "json", "value": 3},               # a number where upstream writes a string: read
        "loss=0.5",
    ]}, problems)
    assert [n for n, _ in got] == ["loss", "nan", "json"]
    assert got[0] == ("loss", 0.5) and math.isnan(got[1][1]) and got[2] == ("json", 3.0)
    assert len(problems) == 6
    assert "metric 'phase' has value 'warmup', not a number" in problems[0]
    assert problems[-1] == "status.trainerStatus.metrics[8]: expected an object, got str"
    problems = []
    assert training.parse_trainer_metrics({"metrics": "loss"}, problems) == ()
    assert problems == ["status.trainerStatus.metrics: expected a list, got str"]
    problems = []
    many = [{"name": f"m{i}", "value": "1"} for i in range(300)]
    assert len(training.parse_trainer_metrics({"metrics": many}, problems)) == training.MAX_METRICS
    assert problems == ["status.trainerStatus.metrics: 300 entries, above the API's 256; the first 256 are read"]


def test_a_bad_metric_costs_a_parse_error_not_the_job() -> None:
    c = Cluster(now=T0)
    h = c.h["trainjobs"]
    h.health = SourceHealth("trainjobs", c.expo)
    c.add("trainjobs", with_metrics([{"name": "loss", "value": "0.5"}, {"name": "samples_per_second", "value": "fast"}]))
    assert h.health.parse_errors == 1
    assert c.series("gangscope_job_trainer_metric") == {metric_key("loss"): 0.5}
    assert c.series("gangscope_job_progress_ratio") == {KEY: 0.45}
    assert jb.parse_trainjob(with_metrics([])).trainer_metrics == ()


# ---- Ray: RayJob / RayCluster joined to their Workload ----------------------------------------

def ray_cluster_setup() -> tuple[Cluster, dict, dict]:
    """kueue#5711's Workload of RayJob rayjob-sample-l58qx as a real cluster printed it
    (tests/fixtures/kueue/real/kueue-5711-rayjob-admitted-v1beta1.yaml), with the RayJob and the
    RayCluster KubeRay makes for it, their status fields as the types define them (kuberay feeaf72f
    ray-operator/apis/ray/v1/rayjob_types.go:303-350, raycluster_types.go:568-639; no printed RayJob
    or RayCluster exists in the corpus)."""
    from exporter.cluster.ray import RayIndex
    from kueue_objects import fixture

    c = Cluster(now=T0)
    c.h.update(RayIndex(c.store).handlers())
    [wl] = [o for o in fixture("real/kueue-5711-rayjob-admitted-v1beta1.yaml") if o["kind"] == "Workload"]
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob",
           "metadata": {"name": "rayjob-sample-l58qx", "namespace": "default", "uid": "9f5410ee-b964-45b2-9679-3df212bbec51"},
           "spec": {"entrypoint": "python /home/ray/samples/sample_code.py"},
           "status": {"rayClusterName": "rayjob-sample-l58qx-raycluster-x7k2p", "jobStatus": "RUNNING",
                      "jobDeploymentStatus": "Running"}}
    cluster = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
               "metadata": {"name": "rayjob-sample-l58qx-raycluster-x7k2p", "namespace": "default", "uid": "rc-uid",
                            "labels": {"ray.io/originated-from-cr-name": "rayjob-sample-l58qx",
                                       "ray.io/originated-from-crd": "RayJob"},
                            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rayjob-sample-l58qx",
                                                 "uid": "9f5410ee-b964-45b2-9679-3df212bbec51", "controller": True}]},
               "status": {"state": "ready", "readyWorkerReplicas": 1, "availableWorkerReplicas": 1,
                          "desiredWorkerReplicas": 2, "head": {"podName": "rayjob-sample-l58qx-raycluster-x7k2p-head-9wq4v"}}}
    c.add("workloads", wl)
    return c, job, cluster


def test_a_rayjobs_cluster_reaches_its_workload_through_the_rayjob() -> None:
    c, job, cluster = ray_cluster_setup()
    c.add("rayclusters", cluster)  # before its RayJob: the Workload is found by the owner uid alone
    info = {"namespace": "default", "raycluster": "rayjob-sample-l58qx-raycluster-x7k2p",
            "workload": "rayjob-rayjob-sample-l58qx-52ced", "rayjob": "rayjob-sample-l58qx",
            "head_pod": "rayjob-sample-l58qx-raycluster-x7k2p-head-9wq4v"}
    assert c.series("gangscope_ray_cluster_info") == {tuple(sorted(info.items())): 1}
    workers = {dict(k)["state"]: v for k, v in c.series("gangscope_ray_cluster_workers").items()}
    assert workers == {"ready": 1, "available": 1, "desired": 2}
    c.add("rayjobs", job)
    assert c.series("gangscope_job_info") == {(("kind", "RayJob"), ("name", "rayjob-sample-l58qx"), ("namespace", "default"),
                                               ("workload", "rayjob-rayjob-sample-l58qx-52ced")): 1}
    assert c.series("gangscope_ray_job_status") == {(
        ("deployment_status", "Running"), ("job_status", "RUNNING"), ("name", "rayjob-sample-l58qx"), ("namespace", "default"),
        ("raycluster", "rayjob-sample-l58qx-raycluster-x7k2p")): 1}
    c.add("rayclusters", cluster, event="DELETED")
    assert c.series("gangscope_ray_cluster_info") == {} and c.series("gangscope_ray_cluster_workers") == {}


def test_a_standalone_raycluster_owns_its_workload_and_bad_fields_are_counted() -> None:
    c, _, cluster = ray_cluster_setup()
    standalone = copy.deepcopy(cluster)
    standalone["metadata"].update(name="interactive", uid="rc-standalone")
    del standalone["metadata"]["ownerReferences"]
    c.add("workloads", workload("raycluster-interactive-1f2e3", "default", owner=("RayCluster", "interactive", "rc-standalone")))
    h = c.h["rayclusters"]
    h.health = SourceHealth("rayclusters", c.expo)
    standalone["status"]["readyWorkerReplicas"] = "one"
    c.add("rayclusters", standalone)
    [(key, _)] = c.series("gangscope_ray_cluster_info").items()
    assert dict(key)["workload"] == "raycluster-interactive-1f2e3" and dict(key)["rayjob"] == ""
    assert h.health.parse_errors == 1 and h.health.objects == 1
    assert {dict(k)["state"] for k in c.series("gangscope_ray_cluster_workers")} == {"available", "desired"}
