"""A watch whose peer vanishes without a FIN (a node or load balancer gone) is noticed and resumed.

A silent watch cannot be told from a dead one by a read timeout (bookmarks come about once a
minute), so exporter/kube/client.py enables TCP keepalive: with its defaults a dead connection
is dropped within 45 s. To keep the test short it runs with keepalive shortened to seconds,
in a private network namespace (``unshare --net``) whose loopback it takes down under an
established watch: no FIN, no RST, the peer simply stops answering, as a dead node does.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporter.kube import client

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import asyncio, json, os, subprocess, tempfile, time
    from exporter.exposition import Exposition
    from exporter.health import SourceHealth
    from exporter.kube import client as kc
    from exporter.kube.backoff import BackoffPolicy
    from exporter.kube.cache import ObjectCache
    from exporter.kube.informer import Informer
    from exporter.kube.resources import WORKLOADS
    from exporter.sim.apiserver import SimApiServer, make_object

    kc.KEEPALIVE_IDLE, kc.KEEPALIVE_INTERVAL, kc.KEEPALIVE_PROBES = 1, 1, 2
    kc.DEAD_CONNECTION_SECONDS = 3

    async def main():
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        sim = SimApiServer(bookmark_interval=300)
        sim.serve(WORKLOADS)
        sim.create(make_object(WORKLOADS, "a", "ns"))
        await sim.start()
        # a folder of its own (removed at exit): a fixed path would be another run's on a shared machine
        folder = tempfile.TemporaryDirectory(prefix="gs-deadconn-")
        kubeconfig = sim.write_kubeconfig(os.path.join(folder.name, "kubeconfig"))
        api = await kc.KubeClient.create(kubeconfig, watch_read_slack=300)
        health = SourceHealth("workloads", Exposition())
        inf = Informer(api, WORKLOADS, "v1beta2", ObjectCache(), health, watch_timeout=300,
                       backoff=BackoffPolicy(base=0.05, cap=0.1))
        task = asyncio.create_task(inf.run())
        while sim.open_watches() != 1:
            await asyncio.sleep(0.05)
        subprocess.run(["ip", "link", "set", "lo", "down"], check=True)
        t = time.monotonic()
        while health.errors == 0 and time.monotonic() - t < 30:
            await asyncio.sleep(0.05)
        print(json.dumps({"noticed_after": time.monotonic() - t, "errors": health.errors, "detail": health.detail}))
        task.cancel()

    asyncio.run(main())
""")


def test_defaults_notice_a_dead_connection_within_a_minute() -> None:
    assert client.DEAD_CONNECTION_SECONDS == client.KEEPALIVE_IDLE + client.KEEPALIVE_INTERVAL * client.KEEPALIVE_PROBES
    assert client.DEAD_CONNECTION_SECONDS <= 60


def test_a_watch_on_a_vanished_peer_fails_in_seconds_not_minutes() -> None:
    if not shutil.which("unshare") or not shutil.which("ip"):
        pytest.skip("needs unshare and ip (util-linux, iproute2)")
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {probe.stderr.decode().strip()}")
    done = subprocess.run(["unshare", "--net", sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                          timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    # Read timeout here: 300 s + 300 s of slack. Only keepalive can have noticed it this soon.
    assert result["errors"] >= 1 and result["noticed_after"] < 15, result
    assert "watch" in result["detail"]
