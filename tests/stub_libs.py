"""Helpers for tests that run code against the C stand-ins of libnvidia-ml.so.1 and libcuda.so.1.

The libraries (exporter/sim/libnvml) are compiled with gcc once per test session into the
session's temporary folder; a process started with :func:`exporter.sim.libnvml.environment`
loads them through the dynamic loader exactly as nvidia-ml-py loads the real one.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from exporter.sim import libnvml

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def series(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, keyed by name and sorted labels."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def scrape(port: int) -> str:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return ""


def start_agent(libdir: Path, profile: str, state: Path, work: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """``gangscope agent --nvml real`` (the real nvidia-ml-py) on the stand-in of ``profile``."""
    port = free_port()
    cmd = [sys.executable, "-m", "exporter.node.main", "--nvml", "real", "--listen", f"127.0.0.1:{port}",
           "--node-name", "stub-node", "--kubeconfig", str(work / "no-kubeconfig"),
           "--pod-resources-socket", str(work / "no-kubelet.sock"), "--sysfs", str(work), *extra]
    log = (work / f"agent-{port}.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=libnvml.environment(libdir, profile, state), stdout=log, stderr=subprocess.STDOUT)
    return proc, port


def wait_until(check: Callable[[], bool], proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Poll ``check`` until it holds; fails at once if the process died (with its exit status)."""
    deadline = time.monotonic() + timeout
    while not check():
        code = proc.poll()
        assert code is None, f"the agent exited with status {code}"
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> int:
    proc.terminate()
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
