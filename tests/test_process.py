"""``gangscope collector`` and ``gangscope agent`` as real processes: SIGTERM ends each within a
few seconds with exit status 0, after closing its watch streams (the simulated API server sees
them end) and its listening socket.

The simulated API server (and for the agent the gRPC kubelet) run on their own event loops in
threads of this process, so they keep answering while the test blocks on the child.
tests/test_agent.py already covers the agent's SIGTERM without Kubernetes, including an NVML
call stuck in the driver; here both processes hold live watches when the signal arrives.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import threading
import time
import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.kube.resources import AGENT_NODE, AGENT_PODS, LOCAL_QUEUES, NODES, TOPOLOGIES, WORKLOADS
from exporter.sim.apiserver import SimApiServer, make_object
from exporter.sim.kubelet import SimContainer, SimKubelet, SimPod
from exporter.sim.nvml import SimNvml
from kueue_objects import admitted_conditions, node, topology, workload

GANGSCOPE = str(Path(sys.executable).with_name("gangscope"))
FIXTURE = str(Path(__file__).parent / "fixtures" / "sysfs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sim() -> Iterator[SimApiServer]:
    server = SimApiServer(bookmark_interval=0.2).start_in_thread()
    yield server
    server.stop_thread()


def wait_for(check: Callable[[], bool], timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc.poll() is not None:
            raise AssertionError(f"exited early ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


DEV_MODE = {**os.environ, "PYTHONDEVMODE": "1"}


def metrics(port: int) -> str:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
    except OSError:
        return ""


def terminate(proc: subprocess.Popen, port: int, sim: SimApiServer) -> str:
    """SIGTERM; returns stderr. Asserts exit 0 within 5 s, watches closed and the port released."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    elapsed = time.monotonic() - t0
    stderr = proc.stderr.read().decode()  # type: ignore[union-attr]
    assert code == 0, stderr[-2000:]
    assert elapsed < 5, f"took {elapsed:.1f} s to stop"
    # Python's development mode reports sockets, sessions and transports left open at exit.
    for leak in ("ResourceWarning", "Unclosed", "unclosed", "Traceback", "Task was destroyed"):
        assert leak not in stderr, stderr[-3000:]
    deadline = time.monotonic() + 2
    while sim.call(sim.open_watches):  # the server notices at its next write (bookmarks every 0.2 s)
        assert time.monotonic() < deadline, "watch streams still open on the server"
        time.sleep(0.05)
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))
    return stderr


def test_collector_sigterm(sim: SimApiServer, tmp_path: Path) -> None:
    def seed() -> None:
        for r in (WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, NODES):
            sim.serve(r)
        sim.create(topology())
        sim.create(node("h1", "b1", "r1"))
        sim.create(workload("w", hosts=["h1"], conditions=admitted_conditions()))

    sim.call(seed)
    kubeconfig = sim.call(sim.write_kubeconfig, str(tmp_path / "kubeconfig"))
    port = free_port()
    proc = subprocess.Popen([GANGSCOPE, "collector", "--kubeconfig", kubeconfig, "--listen", f"127.0.0.1:{port}",
                             "--log-level", "info"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=DEV_MODE)
    try:
        wait_for(lambda: 'workload="w"' in metrics(port) and sim.call(sim.open_watches) == 4, 15, proc)
    except BaseException:
        proc.kill()
        raise
    stderr = terminate(proc, port, sim)
    assert "collector_stopping" in stderr


def test_agent_sigterm(sim: SimApiServer, tmp_path: Path) -> None:
    def seed() -> None:
        sim.serve(AGENT_NODE)
        sim.serve(AGENT_PODS)
        sim.create(make_object(AGENT_NODE, "gpu-1", None, labels={"kubernetes.io/hostname": "gpu-1"}))
        sim.create(make_object(AGENT_PODS, "train-0", "team", spec={"nodeName": "gpu-1"}))

    sim.call(seed)
    kubeconfig = sim.call(sim.write_kubeconfig, str(tmp_path / "kubeconfig"))
    # A live kubelet on its own loop, so the agent holds an open gRPC channel when the signal comes.
    sock = f"/tmp/gs-proc-{free_port()}.sock"
    kubelet = SimKubelet(sock, [SimPod("team", "train-0", [SimContainer("c", [("nvidia.com/gpu", [SimNvml().gpus[0].uuid])])])])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(kubelet.start(), loop).result(5)
    port = free_port()
    proc = subprocess.Popen([GANGSCOPE, "agent", "--nvml", "sim", "--kubeconfig", kubeconfig, "--node-name", "gpu-1",
                             "--listen", f"127.0.0.1:{port}", "--pod-resources-socket", sock, "--sysfs", FIXTURE,
                             "--sample-interval", "0.1", "--pod-resources-interval", "0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=DEV_MODE)
    try:
        try:
            wait_for(lambda: 'pod="train-0"' in metrics(port) and sim.call(sim.open_watches) == 2, 15, proc)
        except BaseException:
            proc.kill()
            raise
        stderr = terminate(proc, port, sim)
        assert "agent_stopping" in stderr
    finally:
        asyncio.run_coroutine_threadsafe(kubelet.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
