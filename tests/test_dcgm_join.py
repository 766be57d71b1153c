"""The dcgm-exporter join rules on real dcgm-exporter output, through promtool.

Every line of tests/fixtures/dcgm/*.prom (printed by an H100 and a GB200 cluster: labels gpu,
UUID, pci_bus_id, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION, and container/namespace/pod
with an empty pod_uid on the one GPU a pod holds) becomes an input series as it was scraped;
gangscope's agent series for the same GPUs are written beside them, and promtool checks what the
recording rules make of them. A rule that only joined hand-written label sets could pass while
failing on dcgm-exporter's real shape (``Hostname`` vs ``hostname``, absent vs empty labels).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "dcgm"
RULES = ROOT / "alerts" / "gangscope-rules.yaml"
# Where gangscope's agent runs on each real node of the fixtures (its topology labels).
NODES = {
    "ip-10-0-171-111.ec2.internal": ("b1", "r1"),  # dcgm-01: 8x H100
    "ip-100-64-135-20.ec2.internal": ("b2", "nvl72-1"),  # dcgm-03: 4x GB200
}
HELD = ("dynamo-workload", "vllm-agg-0-vllmdecodeworker-s65j5")  # the pod dcgm-01 maps to GPU 0
WORKLOAD = "vllm-agg"
HOST = "ip-10-0-171-111.ec2.internal"
# --use-old-namespace: NVIDIA/dcgm-exporter internal/pkg/collector/gpu_collector.go 316-319 (uuid) and
# internal/pkg/transformation/const.go (pod_name, pod_namespace, container_name) @d5e5f51.
OLD_NAMESPACE = {"UUID": "uuid", "pod": "pod_name", "namespace": "pod_namespace", "container": "container_name"}


def load_dcgm() -> list[tuple[str, dict[str, str], float]]:
    out = []
    for path in sorted(FIXTURES.glob("dcgm-*.prom")):
        for fam in text_string_to_metric_families(path.read_text()):
            out += [(s.name, dict(s.labels), s.value) for s in fam.samples]
    return out


def series(name: str, labels: dict[str, str]) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}}"


def promtool(tmp_path: Path, input_series: list[dict], tests: list[dict]) -> subprocess.CompletedProcess:
    path = tmp_path / "dcgm-test.yaml"
    path.write_text(yaml.safe_dump({
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, "promql_expr_test": tests}],
    }, sort_keys=False))
    return subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True)


def test_the_fixtures_are_real_dcgm_output() -> None:
    samples = load_dcgm()
    names = {n for n, _, _ in samples}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"} <= names
    assert {l["Hostname"] for _, l, _ in samples} == set(NODES)
    held = [l for _, l, _ in samples if l.get("pod")]
    assert held and all((l["namespace"], l["pod"], l["pod_uid"], l["gpu"]) == (*HELD, "", "0") for l in held)


def test_dcgm_series_join_gangscope_workload_and_topology(tmp_path: Path) -> None:
    samples = load_dcgm()
    gpus = {(l["Hostname"], l["gpu"], l["UUID"], l["modelName"], l["pci_bus_id"]) for _, l, _ in samples}
    inputs: list[dict] = []
    for name, labels, value in samples:
        inputs.append({"series": series(name, {"job": "dcgm-exporter", "instance": labels["Hostname"] + ":9400", **labels}),
                       "values": f"{value:g}x10"})
    for host, gpu, uuid, model, bus in sorted(gpus):
        block, rack = NODES[host]
        topo = {"job": "gangscope-agent", "instance": f"{host}:9401", "node": host, "block": block, "rack": rack, "host": host}
        inputs.append({"series": series("gangscope_gpu_info", {**topo, "gpu": gpu, "uuid": uuid, "name": model,
                                                               "pci_bus_id": bus, "driver_version": "580"}), "values": "1x10"})
        if (host, gpu) == ("ip-10-0-171-111.ec2.internal", "0"):
            inputs.append({"series": series("gangscope_gpu_pod_info", {
                **topo, "gpu": gpu, "uuid": uuid, "namespace": HELD[0], "pod": HELD[1], "container": "main",
                "workload": WORKLOAD, "podset": "main", "podgroup": ""}), "values": "1x10"})
    # A dcgm-exporter run with --use-old-namespace names the label `uuid` (and the pod labels
    # pod_name/pod_namespace/container_name): the rules copy it into UUID, so it joins as the others.
    name, held_labels, value = next((n, l, v) for n, l, v in samples if n == "DCGM_FI_DEV_GPU_UTIL" and l.get("pod"))
    old = {OLD_NAMESPACE.get(k, k): v for k, v in held_labels.items()}
    inputs.append({"series": series(name, {"job": "dcgm-exporter-old", "instance": "old:9400", **old}), "values": "9x10"})

    util = [(l, v) for n, l, v in samples if n == "DCGM_FI_DEV_GPU_UTIL"]
    expected_join = []
    for labels, value in util:
        block, rack = NODES[labels["Hostname"]]
        out = {"job": "dcgm-exporter", "instance": labels["Hostname"] + ":9400", **labels,
               "node": labels["Hostname"], "block": block, "rack": rack, "host": labels["Hostname"]}
        if labels.get("pod"):
            out["workload"] = WORKLOAD
        expected_join.append({"labels": series("uuid:DCGM_FI_DEV_GPU_UTIL:join", out), "value": value})
    host = held_labels["Hostname"]
    expected_join.append({"labels": series("uuid:DCGM_FI_DEV_GPU_UTIL:join", {
        "job": "dcgm-exporter-old", "instance": "old:9400", **old, "UUID": held_labels["UUID"], "node": host,
        "block": NODES[host][0], "rack": NODES[host][1], "host": host, "namespace": HELD[0], "workload": WORKLOAD}), "value": 9})
    racks: dict[tuple[str, str], list[float]] = {}
    for labels, value in util:
        racks.setdefault(NODES[labels["Hostname"]], []).append(value)
    racks[NODES[host]].append(9)  # the old-namespace series joins its rack too
    tests = [
        {"expr": "uuid:DCGM_FI_DEV_GPU_UTIL:join", "eval_time": "5m", "exp_samples": expected_join},
        {"expr": "namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg", "eval_time": "5m", "exp_samples": [
            {"labels": series("namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg", {"namespace": HELD[0], "workload": WORKLOAD}),
             "value": (next(v for l, v in util if l.get("pod")) + 9) / 2}]},
        {"expr": "rack:DCGM_FI_DEV_GPU_UTIL:avg", "eval_time": "5m", "exp_samples": [
            {"labels": series("rack:DCGM_FI_DEV_GPU_UTIL:avg", {"block": b, "rack": r}), "value": sum(v) / len(v)}
            for (b, r), v in sorted(racks.items())]},
        {"expr": "count(uuid:DCGM_FI_DEV_MEM_COPY_UTIL:join)", "eval_time": "5m", "exp_samples": [
            {"labels": "{}", "value": sum(1 for n, _, _ in samples if n == "DCGM_FI_DEV_MEM_COPY_UTIL")}]},
    ]
    result = promtool(tmp_path, inputs, tests)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr


def test_generator_joins_every_configured_family() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] if g["name"] == "gangscope-dcgm.rules" for r in g["rules"]]
    config = yaml.safe_load((ROOT / "alerts" / "config.yaml").read_text())["dcgm_join"]
    records = {r["record"] for r in rules}
    for family, agg in config.items():
        assert {f"uuid:{family}:join", f"namespace_workload:{family}:{agg}", f"rack:{family}:{agg}"} <= records


# How each dcgm-exporter release labels the same two GPUs of dcgm-01 (GPU 0 held by the pod, GPU 1
# idle), from the fixture's real lines. NVIDIA/dcgm-exporter: the host label is Hostname in the GPU
# template of every tag from 3.3.9-3.6.1 (pkg/dcgmexporter/pipeline.go 299) to 4.5.3-4.8.2
# (internal/pkg/rendermetrics/render_metrics.go 47) and hostname from d5e5f51 on (#655, "Rename
# Hostname label to hostname"); --use-old-namespace renames UUID and the pod labels (OLD_NAMESPACE);
# a ServiceMonitor without honorLabels turns namespace/pod into exported_namespace/exported_pod.
# The joined fields keep their names and units in etc/default-counters.csv at every one of those tags
# (and at 4.6.0-4.8.3, the next tag). 4.9.0 renames the driver label DCGM_FI_DRIVER_VERSION to
# DCGM_FI_SYSTEM_DRIVER_VERSION (its release notes, "Metrics"); the join passes it through as any label.
VERSIONS = {
    "3.3.9-3.6.1 to 4.5.3-4.8.2": {},
    "after 4.5.3-4.8.2 (d5e5f51)": {"Hostname": "hostname"},
    "4.9.0 and 4.10.0": {"Hostname": "hostname", "DCGM_FI_DRIVER_VERSION": "DCGM_FI_SYSTEM_DRIVER_VERSION"},
    "--use-old-namespace": OLD_NAMESPACE,
    "scraped without honorLabels": {"namespace": "exported_namespace", "pod": "exported_pod", "container": "exported_container"},
}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_dcgm_exporter_release_joins(tmp_path: Path, version: str) -> None:
    rename = VERSIONS[version]
    lines = [(n, l, v) for n, l, v in load_dcgm() if n == "DCGM_FI_DEV_GPU_UTIL" and l["Hostname"] == HOST and l["gpu"] in ("0", "1")]
    assert len(lines) == 2
    block, rack = NODES[HOST]
    topo = {"job": "gangscope-agent", "instance": f"{HOST}:9401", "node": HOST, "block": block, "rack": rack, "host": HOST}
    inputs, expected = [], []
    for name, labels, value in lines:
        shaped = {"job": "dcgm-exporter", "instance": f"{HOST}:9400", **{rename.get(k, k): v for k, v in labels.items()}}
        inputs.append({"series": series(name, shaped), "values": f"{value:g}x10"})
        inputs.append({"series": series("gangscope_gpu_info", {**topo, "gpu": labels["gpu"], "uuid": labels["UUID"],
                                                               "name": labels["modelName"], "pci_bus_id": labels["pci_bus_id"],
                                                               "driver_version": "580"}), "values": "1x10"})
        out = {**shaped, "UUID": labels["UUID"], "node": HOST, "block": block, "rack": rack, "host": HOST}
        if labels.get("pod"):
            inputs.append({"series": series("gangscope_gpu_pod_info", {
                **topo, "gpu": labels["gpu"], "uuid": labels["UUID"], "namespace": HELD[0], "pod": HELD[1], "container": "main",
                "workload": WORKLOAD, "podset": "main", "podgroup": ""}), "values": "1x10"})
            out.update(namespace=HELD[0], workload=WORKLOAD)
        expected.append({"labels": series("uuid:DCGM_FI_DEV_GPU_UTIL:join", out), "value": value})
    held = next(v for _, l, v in lines if l.get("pod"))
    tests = [
        {"expr": "uuid:DCGM_FI_DEV_GPU_UTIL:join", "eval_time": "5m", "exp_samples": expected},
        {"expr": "namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg", "eval_time": "5m", "exp_samples": [
            {"labels": series("namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg", {"namespace": HELD[0], "workload": WORKLOAD}),
             "value": held}]},
    ]
    result = promtool(tmp_path, inputs, tests)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr


def test_mig_instances_join_the_workload_that_holds_each(tmp_path: Path) -> None:
    """A MIG instance's series carry the parent's UUID and GPU_I_ID (render_metrics.go 47,
    gpu_collector.go 340, 351-352): each joins the workload holding that instance (the agent's
    pod_info names the MIG device, its mig_device_info the instance id), and the parent's own
    series keeps its topology without a workload."""
    parent = "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005"
    migs = {"1": ("MIG-11111111-0000-4000-8000-000000000001", "team-a", "infer-a"),
            "2": ("MIG-22222222-0000-4000-8000-000000000002", "team-b", "infer-b")}
    block, rack = NODES[HOST]
    topo = {"job": "gangscope-agent", "instance": f"{HOST}:9401", "node": HOST, "block": block, "rack": rack, "host": HOST}
    base = {"job": "dcgm-exporter", "instance": f"{HOST}:9400", "gpu": "0", "UUID": parent, "pci_bus_id": "00000000:53:00.0",
            "device": "nvidia0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": HOST}
    inputs = [
        {"series": series("gangscope_gpu_info", {**topo, "gpu": "0", "uuid": parent, "name": "NVIDIA H100 80GB HBM3",
                                                 "pci_bus_id": "00000000:53:00.0", "driver_version": "580"}), "values": "1x10"},
        {"series": series("DCGM_FI_DEV_GPU_UTIL", base), "values": "50x10"},
    ]
    expected = [{"labels": series("uuid:DCGM_FI_DEV_GPU_UTIL:join", {**base, "node": HOST, "block": block, "rack": rack,
                                                                      "host": HOST}), "value": 50}]
    for gi, (mig, ns, workload) in migs.items():
        labels = {**base, "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": gi, "namespace": ns, "pod": f"{workload}-0", "container": "main"}
        inputs += [
            {"series": series("DCGM_FI_DEV_GPU_UTIL", labels), "values": f"{10 * int(gi)}x10"},
            {"series": series("gangscope_gpu_mig_device_info", {**topo, "gpu": "0", "uuid": parent, "mig_uuid": mig,
                                                                "gpu_instance": gi}), "values": "1x10"},
            {"series": series("gangscope_gpu_pod_info", {**topo, "gpu": "0", "uuid": mig, "namespace": ns, "pod": f"{workload}-0",
                                                         "container": "main", "workload": workload, "podset": "main",
                                                         "podgroup": ""}), "values": "1x10"},
        ]
        expected.append({"labels": series("uuid:DCGM_FI_DEV_GPU_UTIL:join", {
            **labels, "node": HOST, "block": block, "rack": rack, "host": HOST, "workload": workload}), "value": 10 * int(gi)})
    tests = [
        {"expr": "uuid:DCGM_FI_DEV_GPU_UTIL:join", "eval_time": "5m", "exp_samples": expected},
        {"expr": "namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg", "eval_time": "5m", "exp_samples": [
            {"labels": series("namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg", {"namespace": "team-a", "workload": "infer-a"}), "value": 10},
            {"labels": series("namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg", {"namespace": "team-b", "workload": "infer-b"}), "value": 20}]},
    ]
    result = promtool(tmp_path, inputs, tests)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
