"""``gangscope snapshot``: dumps in every shape kubectl writes, bad documents, both formats, promtool."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from exporter import snapshot
from kueue_objects import FIXTURES, admitted_conditions, fixture, local_queue, node, sample, series, topology, workload


def run_snapshot(capfdbinary, *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    snapshot.add_arguments(parser)
    code = snapshot.run(parser.parse_args(list(argv)))
    out, err = capfdbinary.readouterr()
    return code, out.decode(), err.decode()


def workload_series(text: str) -> dict:
    return {k: v for k, v in series(text).items() if k[0].startswith(("gangscope_workload", "gangscope_topology"))}


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    """A folder like ``kubectl get ... -o yaml > file`` per kind, plus the shared fixtures."""
    d = tmp_path / "dump"
    (d / "kueue").mkdir(parents=True)
    for name in ("workload-v1beta2-admitted-tas.yaml", "workload-v1beta2-tas-node-failure.yaml"):
        shutil.copy(FIXTURES / name, d / "kueue" / name)
    (d / "cluster.yaml").write_text(yaml.safe_dump_all([
        topology(),
        {"apiVersion": "v1", "kind": "List", "items": [node("gke-ml-a3mega-pool-1-5d2f7a1c-jn2q", "b1", "r1")]},
        local_queue("ml-team-queue", "ml-team", "gpu-cluster-queue"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ignored"}},
    ]))
    (d / "notes.txt").write_text("not a dump")
    return d


def test_folder_dump_text_and_promtool(dump: Path, capfdbinary) -> None:
    code, out, err = run_snapshot(capfdbinary, "--from-file", str(dump))
    assert code == 0
    s = series(out)
    nw = {"namespace": "ml-team", "workload": "job-llama-train-f48ba"}
    # the files hold three snapshots of one Workload: the last wins, the eviction between them is counted
    assert s[sample("gangscope_workload_stage", **nw, stage="queued")] == 1
    assert s[sample("gangscope_topology_evictions_total", reason="NodeFailures", underlying_cause="", block="b1",
                    rack="r1")] == 1
    info = [dict(k[1]) for k in s if k[0] == "gangscope_workload_info"]
    assert info[0]["cluster_queue"] == "gpu-cluster-queue"  # pending: from the LocalQueue
    assert s[sample("gangscope_source_objects", source="workloads")] == 1
    assert s[sample("gangscope_parse_errors_total", source="workloads")] == 0
    assert "1 object(s) of kind ConfigMap ignored" in err
    lint = subprocess.run(["promtool", "check", "metrics"], input=out.encode(), capture_output=True)
    assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()


def test_openmetrics_format_parses(dump: Path, capfdbinary) -> None:
    code, out, _ = run_snapshot(capfdbinary, "--from-file", str(dump), "--format", "openmetrics")
    assert code == 0 and out.endswith("# EOF\n")
    fams = {f.name: f for f in parse_openmetrics(out)}
    assert fams["gangscope_workload"].type == "info"
    assert fams["gangscope_topology_evictions"].type == "counter"
    assert len(fams["gangscope_workload_topology_pods"].samples) == 16


def test_json_list_typed_list_and_yaml_agree(tmp_path: Path, capfdbinary) -> None:
    objs = [workload("a", conditions=admitted_conditions()), workload("b", version="v1beta1")]
    (tmp_path / "list.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    typed = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "metadata": {"resourceVersion": "9"},
             "items": [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in objs]}
    (tmp_path / "typed.json").write_text(json.dumps(typed))
    (tmp_path / "multi.yaml").write_text(yaml.safe_dump_all(objs))
    outputs = []
    for name in ("list.json", "typed.json", "multi.yaml"):
        code, out, _ = run_snapshot(capfdbinary, "--from-file", str(tmp_path / name))
        assert code == 0
        outputs.append(workload_series(out))
    assert outputs[0] == outputs[2]
    # the typed list has no per-item apiVersion: both items are read as its own v1beta2
    assert set(outputs[1]) == set(outputs[0])
    assert len([k for k in outputs[0] if k[0] == "gangscope_workload_info"]) == 2


def test_malformed_document_is_reported_and_skipped(tmp_path: Path, capfdbinary) -> None:
    f = tmp_path / "mixed.yaml"
    f.write_text(
        yaml.safe_dump(workload("first")) + "---\n"
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata:\n  name: broken\n  labels: {a: [unclosed\n"
        "---\n" + yaml.safe_dump(workload("third")) + "---\n- just\n- a list of strings\n---\nkind: Workload\n"
    )
    code, out, err = run_snapshot(capfdbinary, "--from-file", str(f))
    assert code == 0
    assert f"{f}: document 1 (name broken): malformed YAML" in err
    assert "document 3" in err or "#3" in err  # the bare list of strings
    assert "no kind/apiVersion" in err
    names = {dict(k[1])["workload"] for k in series(out) if k[0] == "gangscope_workload_info"}
    assert names == {"first", "third"}


def test_malformed_object_counted_as_parse_error(tmp_path: Path, capfdbinary) -> None:
    bad = workload("bad")
    bad["spec"]["active"] = "sometimes"
    nameless = workload("x")
    del nameless["metadata"]["name"]
    (tmp_path / "w.yaml").write_text(yaml.safe_dump_all([bad, nameless]))
    code, out, _ = run_snapshot(capfdbinary, "--from-file", str(tmp_path / "w.yaml"))
    assert code == 0
    assert series(out)[sample("gangscope_parse_errors_total", source="workloads")] == 2


@pytest.mark.parametrize("content", ["", "just text\n", "{not json", "- 1\n- 2\n"])
def test_nothing_readable_exits_1(tmp_path: Path, capfdbinary, content: str) -> None:
    f = tmp_path / "empty.yaml"
    f.write_text(content)
    code, out, err = run_snapshot(capfdbinary, "--from-file", str(f))
    assert code == 1 and out == "" and "no readable Kubernetes objects" in err


def test_missing_path_exits_1(tmp_path: Path, capfdbinary) -> None:
    code, _, err = run_snapshot(capfdbinary, "--from-file", str(tmp_path / "nope"))
    assert code == 1 and "no such file" in err


def test_fixture_v1beta1_snapshot_has_full_paths_with_flags(tmp_path: Path, capfdbinary) -> None:
    nodes = [node(d.get("values")[0], "b1", "r1" if i < 8 else "r2")
             for i, d in enumerate(fixture("workload-v1beta1-admitted-tas.yaml")[0]["status"]["admission"]["podSetAssignments"][0]
                                   ["topologyAssignment"]["domains"])]
    (tmp_path / "nodes.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": nodes}))
    shutil.copy(FIXTURES / "workload-v1beta1-admitted-tas.yaml", tmp_path / "wl.yaml")
    code, out, _ = run_snapshot(capfdbinary, "--from-file", str(tmp_path), "--topology-levels",
                                "cloud.provider.com/topology-block,cloud.provider.com/topology-rack",
                                "--topology-alias", "cloud.provider.com/topology-rack=nvl_rack")
    assert code == 0
    racks = [dict(k[1])["nvl_rack"] for k in series(out) if k[0] == "gangscope_workload_topology_pods"]
    assert racks.count("r1") == 8 and racks.count("r2") == 8
