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
    # A dcgm-exporter run with --use-old-namespace names the label `uuid`: the UUID join cannot
    # match it, the namespace/pod join does.
    name, labels, value = next((n, l, v) for n, l, v in samples if n == "DCGM_FI_DEV_GPU_UTIL" and l.get("pod"))
    old = {("uuid" if k == "UUID" else k): v for k, v in labels.items()}
    inputs.append({"series": series(name, {"job": "dcgm-exporter-old", "instance": "old:9400", **old}), "values": "7x10"})

    util = [(l, v) for n, l, v in samples if n == "DCGM_FI_DEV_GPU_UTIL"]
    expected_join = []
    for labels, value in util:
        block, rack = NODES[labels["Hostname"]]
        out = {"job": "dcgm-exporter", "instance": labels["Hostname"] + ":9400", **labels,
               "node": labels["Hostname"], "block": block, "rack": rack, "host": labels["Hostname"]}
        if labels.get("pod"):
            out["workload"] = WORKLOAD
        expected_join.append({"labels": series("uuid:DCGM_FI_DEV_GPU_UTIL:join", out), "value": value})
    expected_join.append({"labels": series("uuid:DCGM_FI_DEV_GPU_UTIL:join", {"job": "dcgm-exporter-old", "instance": "old:9400",
                                                                             **old, "workload": WORKLOAD}), "value": 7})
    racks: dict[tuple[str, str], list[float]] = {}
    for labels, value in util:
        racks.setdefault(NODES[labels["Hostname"]], []).append(value)
    tests = [
        {"expr": "uuid:DCGM_FI_DEV_GPU_UTIL:join", "eval_time": "5m", "exp_samples": expected_join},
        {"expr": "namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg", "eval_time": "5m", "exp_samples": [
            {"labels": series("namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg", {"namespace": HELD[0], "workload": WORKLOAD}),
             "value": (next(v for l, v in util if l.get("pod")) + 7) / 2}]},
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
