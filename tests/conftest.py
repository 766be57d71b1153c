"""Shared fixtures. Each helper's fixtures live under a clearly prefixed name; keep this file generic."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog

from exporter.kube.client import KubeClient
from exporter.sim.apiserver import SimApiServer


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Every test starts from structlog's defaults (every level kept): a test that ran an entry
    point configured a level filter process-wide, and a later test counting debug events would
    otherwise see none, depending on the order the tests ran in."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


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


# --- a real Kubernetes API server (tests/realapi.py, scripts/real-apiserver) --------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the real API server carries the ``realapi`` marker (``-m realapi``)."""
    for item in items:
        if "real_api" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.realapi)


@pytest.fixture(scope="session")
def real_api(tmp_path_factory: pytest.TempPathFactory):
    """kube-apiserver v1.20.2 and etcd on loopback, for the whole session, with every CRD the
    collector reads and the project's RBAC (deploy/base) applied. Tests share it: they name their
    namespaces and objects uniquely and compare with what the server holds, not with what they wrote."""
    import realapi

    cluster, _ = realapi.started_cluster(tmp_path_factory, "realapi")
    try:
        cluster.install_crds()
        for manifest in ("namespace.yaml", "rbac.yaml"):
            cluster.apply_manifests(Path(__file__).resolve().parent.parent / "deploy" / "base" / manifest)
        yield cluster
    finally:
        cluster.stop()
