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
