"""Debian's real Prometheus holding samples a test chose: ``promtool tsdb create-blocks-from
openmetrics`` writes them as TSDB blocks, and ``prometheus`` serves those blocks on loopback with
no scrape targets, so every query a test sends is answered by the real PromQL engine over exact,
known counters (a counter that grows by R per second has a rate of exactly R)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
AVAILABLE = Path(PROMETHEUS).exists() and Path(PROMTOOL).exists()


def openmetrics(families: dict[str, str], samples: Iterable[tuple[str, dict[str, str], float, float]]) -> str:
    """OpenMetrics text: ``families`` {name: type}; ``samples`` (name, labels, timestamp, value),
    grouped by family as the format requires."""
    by_family: dict[str, list[str]] = {name: [] for name in families}
    for name, labels, ts, value in samples:
        family = name.removesuffix("_total") if families.get(name.removesuffix("_total")) == "counter" else name
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        by_family[family].append(f"{name}{{{text}}} {value!r} {ts:.3f}")
    out = []
    for name, kind in families.items():
        out.append(f"# TYPE {name} {kind}")
        out.extend(by_family[name])
    return "\n".join(out) + "\n# EOF\n"


GPU_FAMILIES = {"gangscope_gpu_pod_info": "gauge", "gangscope_nvlink_transmit_bytes": "counter",
                "gangscope_nvlink_receive_bytes": "counter", "gangscope_pcie_transmit_bytes": "counter",
                "gangscope_pcie_receive_bytes": "counter", "gangscope_workload_stage": "gauge"}
Rate = Callable[[int, float], float]  # bytes/s of GPU g at time t


def gpu_samples(namespace: str, workload: str, node: str, gpus: int, first: int, last: int, nvlink: Rate,
                pcie: tuple[Rate, Rate] | None, step: int = 15) -> Iterator[tuple[str, dict[str, str], float, float]]:
    """What an agent exports for ``gpus`` GPUs of ``node`` held by ``namespace/workload``, scraped
    every ``step`` seconds from ``first`` to ``last``: the pod-resources join, two NVLinks per GPU
    each moving ``nvlink(g, t)`` bytes/s each way, and PCIe transmit and receive (when given)."""
    for g in range(gpus):
        gpu = {"node": node, "gpu": str(g)}
        counters: dict[tuple[str, str], float] = {}
        for t in range(first, last + 1, step):
            yield "gangscope_gpu_pod_info", {**gpu, "namespace": namespace, "workload": workload, "pod": f"{workload}-{node}"}, t, 1.0
            for link in ("0", "1"):
                for name in ("gangscope_nvlink_transmit_bytes_total", "gangscope_nvlink_receive_bytes_total"):
                    counters[(name, link)] = counters.get((name, link), 1e12) + (step * nvlink(g, t) if t > first else 0)
                    yield name, {**gpu, "link": link}, t, counters[(name, link)]
            for name, rate in zip(("gangscope_pcie_transmit_bytes_total", "gangscope_pcie_receive_bytes_total"), pcie or ()):
                counters[(name, "")] = counters.get((name, ""), 1e11) + (step * rate(g, t) if t > first else 0)
                yield name, gpu, t, counters[(name, "")]


def stage_samples(namespace: str, workload: str, first: int, last: int, stage: str = "running",
                  step: int = 15) -> Iterator[tuple[str, dict[str, str], float, float]]:
    """What the collector exports of the Workload's stage (the rules' verdicts and alert
    conditions read it), scraped every ``step`` seconds."""
    for t in range(first, last + 1, step):
        yield "gangscope_workload_stage", {"namespace": namespace, "workload": workload, "stage": stage}, t, 1.0


@contextmanager
def prometheus_with(workdir: Path, text: str) -> Iterator[str]:
    """A running Prometheus whose TSDB holds the OpenMetrics ``text``; yields its base URL."""
    workdir.mkdir(parents=True, exist_ok=True)
    source, tsdb = workdir / "samples.om", workdir / "tsdb"
    source.write_text(text)
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tsdb)],
                   check=True, capture_output=True)
    (workdir / "prometheus.yml").write_text("global: {evaluation_interval: 1m}\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    with (workdir / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={tsdb}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=3650d"],
                                stdout=subprocess.DEVNULL, stderr=log)
        try:
            for _ in range(600):
                if proc.poll() is not None:
                    raise RuntimeError("prometheus exited: " + (workdir / "prometheus.log").read_text()[-2000:])
                try:
                    with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as resp:
                        if resp.status == 200:
                            break
                except OSError:
                    pass
                time.sleep(0.1)
            else:
                raise RuntimeError("prometheus not ready within 60 s")
            yield base
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
