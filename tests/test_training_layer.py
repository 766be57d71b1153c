"""explain's training layer on Debian's real Prometheus, over recorded samples.

Two hours of samples for four jobs (tokens_per_second per pod, gangscope_gpu_pod_info, NVLink
byte counters and link state per GPU) are written as OpenMetrics with timestamps and turned into
TSDB blocks by ``promtool tsdb create-blocks-from openmetrics``; a real Prometheus serves them
and explain's queries run on it. Each job's throughput halves 20 minutes before the end; what else
changes decides the verdict, as in alerts/tests/training.yaml: NVLink with it on the same GPU
(hardware), nothing else (workload), a move to another node with less NVLink (scheduling).
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from exporter import training_layer as tl
from exporter.cluster.jobs import JOB_INFO  # noqa: F401  (the trainer mapping joins gangscope_job_info)

PROMETHEUS, PROMTOOL = Path("/usr/bin/prometheus"), Path("/usr/bin/promtool")
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not (PROMETHEUS.exists() and PROMTOOL.exists()),
                                reason="needs Debian's prometheus and promtool (scripts/setup-env installs them)")

END = (int(time.time()) // 60 - 10) * 60  # within the TSDB's retention, in the past
START = END - 150 * 60
DROP = END - 20 * 60


def samples() -> str:
    """OpenMetrics text: one family after another, each series' samples in time order."""
    fams: dict[str, list[str]] = {}

    def add(name: str, labels: str, value: Any, first: int = START, last: int = END) -> None:
        out = fams.setdefault(name, [])
        for t in range(first, last + 1, 60):
            v = value(t) if callable(value) else value
            out.append(f"{name}{{{labels}}} {v} {t}")

    def gpu(node: str, index: int = 0) -> str:
        return f'job="gangscope-agent",instance="{node}:9400",node="{node}",block="b1",rack="r1",host="{node}",gpu="{index}"'

    def job(wl: str, pod: str, node: str, first: int = START, last: int = END, index: int = 0) -> None:
        # the collector's stage of the Workload, as the rules' verdicts read it
        add("gangscope_workload_stage", f'job="gangscope-collector",instance="collector:8080",namespace="ml",workload="{wl}",'
            'stage="running"', 1)
        add("gangscope_gpu_pod_info", f'{gpu(node, index)},uuid="GPU-{node}-{index}",namespace="ml",pod="{pod}",container="trainer",'
            f'workload="{wl}",podset="workers",podgroup="{wl}"', 1, first, last)

    def tokens(pod: str, before: float, after: float, first: int = START, last: int = END) -> None:
        add("tokens_per_second", f'job="training",instance="{pod}:8000",namespace="ml",pod="{pod}"',
            lambda t: before if t < DROP else after, first, last)

    def nvlink(node: str, before: float, after: float, index: int = 0) -> None:  # bytes per second, as a counter
        # both directions, as the agent exports them: half of the traffic each way
        for direction in ("transmit", "receive"):
            add(f"gangscope_nvlink_{direction}_bytes_total", f'{gpu(node, index)},link="0"',
                lambda t: before / 2 * (min(t, DROP) - START) + after / 2 * max(0, t - DROP))
        add("gangscope_nvlink_link_up", f'{gpu(node, index)},link="0"', 1)

    # hw: one of its two GPUs (gpu 1) falls to a tenth of its NVLink traffic, the other keeps it: a straggler
    job("hw", "hw-0", "n1"), job("hw", "hw-0", "n1", index=1), tokens("hw-0", 1000, 500)
    nvlink("n1", 1e10, 1e10), nvlink("n1", 1e10, 1e9, index=1)
    # even: its one GPU's NVLink halves with its throughput, nothing else: no hardware evidence, no verdict
    job("even", "even-0", "n6"), tokens("even-0", 1000, 500), nvlink("n6", 1e10, 5e9)
    job("data", "data-0", "n2"), tokens("data-0", 1000, 500), nvlink("n2", 1e10, 1e10)
    job("moved", "moved-0", "n3", last=DROP - 60), tokens("moved-0", 1000, 1000, last=DROP - 60), nvlink("n3", 1e10, 1e10)
    job("moved", "moved-1", "n4", first=DROP), tokens("moved-1", 500, 500, first=DROP), nvlink("n4", 1e9, 1e9)
    job("steady", "steady-0", "n5"), tokens("steady-0", 1000, 1000), nvlink("n5", 1e10, 1e10)
    # restarted: JobSet restarted its pods in place at the drop (same GPU, NVLink as before): the
    # restart is a scheduling event, so no "workload" verdict (the rules' restarted event)
    job("restarted", "restarted-0", "n7"), tokens("restarted-0", 1000, 500), nvlink("n7", 1e10, 1e10)
    add("gangscope_job_info", 'job="gangscope-collector",instance="collector:8080",namespace="ml",kind="JobSet",'
        'name="restarted",workload="restarted"', 1)
    add("gangscope_job_restarts_total", 'job="gangscope-collector",instance="collector:8080",namespace="ml",kind="JobSet",'
        'name="restarted"', lambda t: 0 if t < DROP else 1)
    text = []
    for name, lines in fams.items():
        kind = "counter" if name.endswith("_total") else "gauge"
        family = name.removesuffix("_total") if kind == "counter" else name
        text += [f"# TYPE {family} {kind}", *lines]
    return "\n".join(text) + "\n# EOF\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("prom")
    (tmp / "samples.om").write_text(samples())
    subprocess.run([str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", str(tmp / "samples.om"), str(tmp / "data")],
                   check=True, capture_output=True)
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
    port = free_port()
    proc = subprocess.Popen([str(PROMETHEUS), f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=(tmp / "prometheus.log").open("wb"))
    url = f"http://127.0.0.1:{port}"

    async def ready() -> None:
        async with aiohttp.ClientSession() as s:
            for _ in range(600):
                try:
                    async with s.get(url + "/-/ready") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError("Prometheus did not become ready: " + (tmp / "prometheus.log").read_text()[-2000:])

    asyncio.run(ready())
    yield url
    proc.terminate()
    proc.wait(timeout=10)


async def layer(url: str, workload: str, rules: Any = None) -> dict[str, Any]:
    return await tl.training_layer("ml", workload, True, url, END, rules)


def clock(t: int) -> str:
    return time.strftime("%H:%M", time.gmtime(t))


async def test_hardware_workload_and_scheduling_from_a_real_prometheus(prometheus: str) -> None:
    """The rules' verdicts (the shipped rules file, inlined) for each job, and the evidence
    explain shows beside them."""
    hw = await layer(prometheus, "hw")
    assert hw["status"] == "blocking" and hw["evidence"]["verdict"] == "hardware"
    # baseline: the 61 one-minute points of the hour ending 15m before END, 6 of them at or after the drop
    assert hw["evidence"]["throughput"]["baseline"] == pytest.approx((55 * 1000 + 6 * 500) / 61)
    assert hw["evidence"]["throughput"]["down_since"] == DROP
    # the 5m rate of NVLink falls below 0.7 of its baseline two minutes after the drop
    assert hw["summary"] == (f"tokens_per_second 47% below its baseline since {clock(DROP)}; "
                             f"NVLink on gpu 1 of node n1 down 90% since {clock(DROP + 120)}; nvlink_straggler (1): hardware")
    data = await layer(prometheus, "data")
    assert data["evidence"]["verdict"] == "workload"
    assert data["summary"] == (f"tokens_per_second 47% below its baseline since {clock(DROP)}; "
                               "the job's interconnect traffic at 100% of its baseline: workload")
    moved = await layer(prometheus, "moved")
    assert moved["evidence"]["verdict"] == "scheduling" and moved["evidence"]["scheduling_events"] == ["placement_changed"]
    # its new GPU moves what it always moved there; the job's traffic is a tenth of what the old one moved.
    # The old pod's last sample counts for Prometheus's 5m lookback (no stale marker in a backfill): down from DROP+5m.
    assert moved["summary"] == (f"tokens_per_second 52% below its baseline since {clock(DROP + 300)}; the job's interconnect "
                                "traffic at 10% of its baseline; placement_changed in the last 30m: scheduling")
    even = await layer(prometheus, "even")
    assert (even["status"], even["evidence"]["verdict"]) == ("unknown", None)
    steady = await layer(prometheus, "steady")
    assert (steady["status"], steady["summary"]) == ("ok", "tokens_per_second at 100% of its baseline")
    # JobSet restarted its pods in place: the rules count the restart as a scheduling event, so no
    # "workload" verdict (explain once said workload while its job layer printed the restart)
    restarted = await layer(prometheus, "restarted")
    assert (restarted["status"], restarted["evidence"]["verdict"], restarted["evidence"]["scheduling_events"]) == (
        "unknown", None, ["restarted"])
    # every query the layer printed runs as printed
    async with aiohttp.ClientSession() as s:
        for q in [*hw["evidence"]["queries"].values(), *hw["evidence"]["range_queries"].values()]:
            async with s.get(prometheus + "/api/v1/query", params={"query": q, "time": str(END)}) as r:
                assert (await r.json())["status"] == "success", q


async def test_a_missing_or_renamed_metric_is_reported(prometheus: str) -> None:
    """Rules whose only mapping names a metric no job exports: the layer says so with the rules'
    own count of that metric's series."""
    import dataclasses

    from alerts.generate import Config, recording_rules
    from exporter.rule_queries import Rules

    cfg = Config.load()
    assert cfg.training is not None
    renamed = dataclasses.replace(cfg.training.throughput[0], name="tokens_per_sec", metric="tokens_per_sec")
    cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, throughput=(renamed,)))
    doc = await layer(prometheus, "hw", Rules(recording_rules(cfg)))
    assert (doc["status"], doc["summary"]) == ("unknown", "no throughput series for this job (tokens_per_sec: no series in Prometheus)")


def test_the_windows_are_the_configs() -> None:
    """What the layer prints (ratios, windows) is read from the rules, which come from config.yaml."""
    from exporter.rule_queries import Rules

    cfg = yaml.safe_load((ROOT / "alerts" / "config.yaml").read_text())
    tr = cfg["training"]
    w = tl.Windows.of(Rules.load())
    assert (w.baseline, w.window, w.ratio, w.interconnect_ratio, w.min_interconnect) == (
        tr["baseline"], tr["window"], tr["ratio"], tr["interconnect_ratio"], tr["min_interconnect_bytes_per_second"])
    fors = [cfg["alerts"][a]["for"] for a in ("GangscopeJobSlowScheduling", "GangscopeJobSlowHardware", "GangscopeJobSlowWorkload")]
    assert w.offset == f"{5 + max(int(f.rstrip('m')) for f in fors)}m"
    with pytest.raises(ValueError, match="no training verdicts"):
        tl.Windows.of(Rules([{"name": "g", "rules": [{"record": "a:b:c", "expr": "sum(x)"}]}]))


def test_the_demo_rules_fixed_baseline_is_read(tmp_path: Path) -> None:
    """The demo's rules end their baselines at a fixed time (``@ T``, rebased onto the demo's start):
    the layer reads that modifier too, and asks each GPU's baseline at the same time."""
    from exporter.demo import demo_rules
    from exporter.rule_queries import Rules

    paths, _ = demo_rules(tmp_path, 1_800_000_000.0)
    w = tl.Windows.of(Rules.load(paths))
    assert (w.offset, w.when) == ("", "@ 1800000040.000")
    assert ")[20s:1s] @ 1800000040.000)" in tl.queries("ns", "job", Rules.load(paths))["nvlink_gpu_ratio"]
