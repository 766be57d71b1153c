"""--metric-labels-allowlist: kube-state-metrics' syntax, key selection, sanitizing and collisions,
and the Workload and PodGroup label series through the collector's handlers."""

from __future__ import annotations

import argparse

import pytest
from kueue_objects import workload

from exporter.cluster.collector import add_collector_arguments, build_collector, collector_from_args
from exporter.cluster.object_labels import LabelsAllowlist, from_flag, parse_allowlist, prometheus_labels
from exporter.exposition import Exposition



@pytest.mark.parametrize(("value", "expected"), [
    ("workloads=[team,app.kubernetes.io/name],podgroups=[*]",
     {"workloads": ["team", "app.kubernetes.io/name"], "podgroups": ["*"]}),
    ("workloads=[]", {"workloads": []}),
    ("*=[*]", {"*": ["*"]}),
    (" workloads=[ team , app ]", {"workloads": ["team", "app"]}),
    ("podgroups=[example.com/*]", {"podgroups": ["example.com/*"]}),
])
def test_the_flag_parses_as_kube_state_metrics_parses_it(value: str, expected: dict) -> None:
    assert parse_allowlist(value) == expected


@pytest.mark.parametrize("value", [
    "workloads=team", "workloads=[a],", ",workloads=[a]", "workloads=[a]x", "workloads=[a,,b]", "workloads[a]",
    "pods=[app]", "workloads=[*a*]",
])
def test_malformed_flags_are_refused_when_parsed(value: str) -> None:
    with pytest.raises(ValueError):
        parse_allowlist(value)
    p = argparse.ArgumentParser()
    add_collector_arguments(p)
    with pytest.raises(SystemExit):
        p.parse_args(["--metric-labels-allowlist", value])


def test_names_are_sanitized_snake_cased_and_collisions_renamed_in_key_order() -> None:
    """kube-state-metrics' mapToPrometheusLabels (internal/store/utils.go:85-129): the first
    collision renames the name already given to _conflict1, later ones take the next free suffix."""
    assert prometheus_labels({"team": "ml", "app.kubernetes.io/name": "llama", "gpuType": "h100"}) == [
        ("label_app_kubernetes_io_name", "llama"), ("label_gpu_type", "h100"), ("label_team", "ml")]
    assert prometheus_labels({"app-name": "a", "app.name": "b", "app_name": "c"}) == [
        ("label_app_name_conflict1", "a"), ("label_app_name_conflict2", "b"), ("label_app_name_conflict3", "c")]
    # a generated suffix that another key already sanitized to is skipped, never emitted twice
    assert prometheus_labels({"a-b": "1", "a_b": "2", "a_b_conflict1": "3"}) == [
        ("label_a_b_conflict1_conflict1", "1"), ("label_a_b_conflict2", "2"), ("label_a_b_conflict1_conflict2", "3")]


def test_which_keys_are_kept() -> None:
    labels = {"team": "ml", "app.kubernetes.io/name": "llama", "app.kubernetes.io/part-of": "train", "other": "x"}
    allow = LabelsAllowlist({"workloads": ["team", "app.kubernetes.io/*", "missing"], "podgroups": ["other", "*"]})
    assert allow.select("workloads", labels) == [
        ("label_app_kubernetes_io_name", "llama"), ("label_app_kubernetes_io_part_of", "train"), ("label_team", "ml")]
    assert allow.select("podgroups", labels) == [("label_other", "x")], "* counts only as the first entry"
    everything = from_flag(["*=[*]"])
    assert everything is not None and everything.select("podgroups", labels) == prometheus_labels(labels)
    assert from_flag([]) is None
    assert LabelsAllowlist({"workloads": ["team"]}).select("podgroups", labels) is None


def collector(*flags: str) -> tuple[Exposition, dict]:
    p = argparse.ArgumentParser()
    add_collector_arguments(p)
    expo = Exposition()
    _, handlers, _ = collector_from_args(expo, p.parse_args(list(flags)))
    return expo, handlers


def labelled_objects() -> tuple[dict, dict]:
    wl = workload(name="wl")
    wl["metadata"]["labels"] = {"team": "ml", "app.kubernetes.io/name": 'llama "70b"', "kueue.x-k8s.io/job-uid": "u"}
    pg = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
          "metadata": {"name": "pg", "namespace": "team", "uid": "pg-uid", "labels": {"team": "ml", "tier": "gold"}},
          "spec": {"minMember": 2}, "status": {"phase": "Pending"}}
    return wl, pg


def test_label_series_of_workloads_and_podgroups() -> None:
    expo, h = collector("--metric-labels-allowlist", "workloads=[team,app.kubernetes.io/name]",
                        "--metric-labels-allowlist", "podgroups=[*]")
    wl, pg = labelled_objects()
    h["workloads"].replace([wl])
    h["podgroups_coscheduling"].replace([pg])
    lines = [line for line in expo.render(False).decode().splitlines() if line.startswith(("gangscope_workload_labels",
                                                                                          "gangscope_podgroup_labels"))]
    assert lines == [
        'gangscope_workload_labels{namespace="team",workload="wl",label_app_kubernetes_io_name="llama \\"70b\\"",'
        'label_team="ml"} 1',
        'gangscope_podgroup_labels{namespace="team",podgroup="pg",api="coscheduling",label_team="ml",label_tier="gold"} 1',
    ]
    wl["metadata"]["labels"] = {}
    h["workloads"].apply("MODIFIED", wl)
    assert 'gangscope_workload_labels{namespace="team",workload="wl"} 1\n' in expo.render(False).decode()
    h["workloads"].apply("DELETED", wl)
    assert "gangscope_workload_labels{" not in expo.render(False).decode()


def test_off_by_default() -> None:
    expo, h = collector()
    wl, pg = labelled_objects()
    h["workloads"].replace([wl])
    h["podgroups_coscheduling"].replace([pg])
    text = expo.render(False).decode()
    assert "gangscope_workload_labels" not in text and "gangscope_podgroup_labels" not in text
    expo2 = Exposition()
    build_collector(expo2, labels_allowlist=LabelsAllowlist({"workloads": ["team"]}))
    assert "gangscope_workload_labels" in expo2.render(False).decode()
    assert "gangscope_podgroup_labels" not in expo2.render(False).decode()
