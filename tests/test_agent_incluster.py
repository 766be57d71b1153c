"""The agent in a pod: service-account credentials read directly (token, CA, service env), over
real TLS to the simulated API server, without importing the ``kubernetes`` package."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.config import topology_from_args
from exporter.kube import credentials
from exporter.kube.credentials import Credentials, CredentialsError
from exporter.kube.resources import AGENT_NODE, AGENT_PODS, TOPOLOGIES
from exporter.node.agent import Agent
from exporter.sim.apiserver import SimApiServer
from exporter.sim.nvml import SimNvml
from test_agent import BLOCK, RACK, node, parse_args, scrape, series, topology, until

ROOT = Path(__file__).resolve().parent.parent
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def self_signed(d: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 that is its own CA (the cluster CA file in these tests)."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", "server.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=sim-apiserver",
                    "-addext", "subjectAltName=IP:127.0.0.1"], cwd=d, check=True, capture_output=True)
    return str(d / "ca.crt"), str(d / "server.key")


def rotate(token: Path, value: str) -> None:
    token.write_text(value)
    later = time.time_ns() + 10**9
    os.utime(token, ns=(later, later))


@needs_openssl
async def test_agent_in_cluster_with_token_rotation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca, key = self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(ca, key)
    api = await SimApiServer(token="sa-token-1").start(ssl_context=server_ctx)
    for resource in (AGENT_NODE, AGENT_PODS, TOPOLOGIES):
        api.serve(resource)
    api.create(node("b1", "r2"))
    api.create(topology("racks", BLOCK, RACK, "kubernetes.io/hostname"))
    token = tmp_path / "token"
    token.write_text("sa-token-1\n")
    monkeypatch.setattr(credentials, "SA_TOKEN", str(token))
    monkeypatch.setattr(credentials, "SA_CA", ca)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
    args = parse_args("--pod-resources-socket", str(tmp_path / "none.sock"), levels=None)
    levels, _ = topology_from_args(args)
    agent = Agent(args, levels, nvml=lambda: SimNvml())
    await agent.start()
    try:
        assert agent._client.credentials.description == "in-cluster"

        async def labelled(rack: str) -> bool:
            return f'rack="{rack}"' in await scrape(agent.port)

        await until(lambda: labelled("r2"))
        # kubelet rotates the projected token: the next request carries the new one (no 401 first).
        api.rotate_token("sa-token-2")
        rotate(token, "sa-token-2\n")
        before = api.requests["GET /api"]
        assert (await agent._client.get_json("/api"))["versions"] == ["v1"]
        assert api.requests["GET /api"] == before + 1
        api.update(node("b1", "r7"))
        await until(lambda: labelled("r7"), timeout=10)
        text = await scrape(agent.port)
        ups = {s[1]["source"]: s[2] for s in series(text) if s[0] == "gangscope_source_up"}
        assert ups["node"] == ups["pods"] == ups["topologies"] == 1
    finally:
        await agent.stop()
        await api.stop()


def test_in_cluster_credentials_from_the_service_account_files(tmp_path: Path) -> None:
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("s3cr3t-sa\n")
    ca.write_text(Path(certifi_where()).read_text())
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    creds = Credentials.load(token_file=str(token), ca_file=str(ca), environ=env)
    assert creds.host == "https://[fd00::1]:6443" and creds.token_file == str(token)
    assert isinstance(creds.ssl, ssl.SSLContext) and creds.ssl.verify_mode == ssl.CERT_REQUIRED
    assert "s3cr3t" not in repr(creds)
    for broken_env, broken_token, broken_ca, match in (
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, "tok", str(ca), "KUBERNETES_SERVICE_PORT"),
        (env, "", str(ca), "empty"),
        (env, "tok", str(tmp_path / "missing.crt"), "CA file"),
    ):
        token.write_text(broken_token)
        with pytest.raises(CredentialsError, match=match):
            Credentials.load(token_file=str(token), ca_file=broken_ca, environ=broken_env)


def certifi_where() -> str:
    import certifi

    return certifi.where()


def test_agent_start_path_does_not_import_heavy_packages(tmp_path: Path) -> None:
    """In a pod the agent never needs the kubernetes package (nor yaml): about 20 MiB of resident
    modules on every GPU node. prometheus_client is imported, for its process and platform
    collectors (exporter/selfmetrics.py): about 0.5 MiB on top of aiohttp, which already loads the
    standard-library modules it needs."""
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("tok")
    ca.write_text(Path(certifi_where()).read_text())
    code = f"""
import sys
import exporter.node.main, exporter.node.agent, exporter.kube.client, exporter.kube.sources, exporter.serving
import exporter.node.nodeinfo
from exporter.kube.credentials import Credentials
creds = Credentials.load(token_file={str(token)!r}, ca_file={str(ca)!r},
                         environ={{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}})
assert creds.description == "in-cluster", creds.description
print(sorted({{m.split(".")[0] for m in sys.modules}} & {{"kubernetes", "yaml", "requests", "urllib3"}}))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    # No Kubernetes access at all (a missing kubeconfig): still no kubernetes package.
    code = f"""
import sys
from exporter.kube.credentials import Credentials, CredentialsError
try:
    Credentials.load(kubeconfig={str(tmp_path / "missing")!r})
except CredentialsError as e:
    print("kubernetes" in sys.modules, e)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("False cannot load credentials"), out.stdout + out.stderr
