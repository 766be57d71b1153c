"""Shared fixtures. Each helper's fixtures live under a clearly prefixed name; keep this file generic."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.kube.client import KubeClient
from exporter.sim.apiserver import SimApiServer


# --- Kubernetes API (exporter/kube, exporter/sim/apiserver.py) ---------------------------------


@pytest.fixture
async def kube_sim() -> AsyncIterator[SimApiServer]:
    """A running simulated API server on 127.0.0.1 (nothing served yet: call ``serve``)."""
    sim = SimApiServer(bookmark_interval=0.2)
    await sim.start()
    yield sim
    await sim.stop()


@pytest.fixture
def kube_sim_kubeconfig(kube_sim: SimApiServer, tmp_path: Path) -> str:
    """A kubeconfig file for ``kube_sim`` with its valid token."""
    return kube_sim.write_kubeconfig(str(tmp_path / "kubeconfig"))


@pytest.fixture
async def kube_client(kube_sim_kubeconfig: str) -> AsyncIterator[KubeClient]:
    """A KubeClient for ``kube_sim`` through the kubeconfig, with short timeouts for fault tests."""
    client = await KubeClient.create(kubeconfig=kube_sim_kubeconfig, request_timeout=2.0, watch_read_slack=1.0)
    yield client
    await client.close()


# --- kubelet pod-resources socket (exporter/node, exporter/sim/kubelet.py) ----------------------


@pytest.fixture
def kubelet_socket():
    """A path for a unix socket in a fresh short folder (socket paths are limited to ~107 bytes,
    too few for pytest's tmp_path)."""
    import os
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="gs-", dir="/tmp")
    yield os.path.join(folder, "kubelet.sock")
    shutil.rmtree(folder, ignore_errors=True)
