"""``--metrics-auth`` with the real TokenReview and SubjectAccessReview of kube-apiserver: the
collector and the agent run as their own ServiceAccounts with the project's RBAC
(``deploy/base/rbac.yaml``: they may create both reviews), and scrapers present real
ServiceAccount tokens. On every route the middleware guards today (found by asking each route
without a token): a token whose user may ``get /metrics`` (bound to ``gangscope-metrics-reader``)
reads it; a valid token without that right gets 403; no token, a token the server never issued
and an expired one get 401. Health endpoints stay open."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from exporter.config import topology_from_args
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.sim.nvml import SimNvml
from collectors import started_collector
from kueue_objects import sample, series
from realapi import RealCluster, token_claims

FIXTURE_SYSFS = str(Path(__file__).parent / "fixtures" / "sysfs")


async def get(port: int, path: str, token: str | None = None) -> tuple[int, str, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}", headers=headers) as r:
        return r.status, await r.text(), dict(r.headers)


@pytest.fixture
def scrapers(real_api: RealCluster) -> dict[str, str]:
    """Tokens: allowed (bound to the project's gangscope-metrics-reader), a stranger, an expired
    one of the allowed account, and one the server never issued."""
    ns = f"monitoring-{uuid.uuid4().hex[:6]}"
    real_api.service_account(ns, "prometheus", cluster_roles=["gangscope-metrics-reader"])
    real_api.service_account(ns, "stranger")
    expired = real_api.expired_token(ns, "prometheus")
    assert token_claims(expired)["sub"] == f"system:serviceaccount:{ns}:prometheus"
    forged = expired.rsplit(".", 1)[0] + ".c2lnbmF0dXJl"
    for token, why in ((expired, "expired"), (forged, "invalid bearer token")):
        review = real_api.admin.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        assert review["status"].get("authenticated") is not True and why in review["status"]["error"], review["status"]
    return {"allowed": real_api.token(ns, "prometheus"), "forbidden": real_api.token(ns, "stranger"),
            "expired": expired, "never-issued": forged}


def routes(app: Any) -> list[str]:
    return sorted({r.resource.canonical for r in app.router.routes() if r.method == "GET"})


async def check_every_guarded_route(port: int, app: Any, tokens: dict[str, str]) -> list[str]:
    """Ask each route as each scraper; returns the guarded routes."""
    guarded = []
    for path in routes(app):
        status, body, headers = await get(port, path)
        if status != 401:
            continue
        guarded.append(path)
        assert headers["WWW-Authenticate"].startswith("Bearer") and "gangscope_" not in body
        assert (await get(port, path, tokens["allowed"]))[0] == 200, path
        status, body, _ = await get(port, path, tokens["forbidden"])
        assert status == 403 and "gangscope_" not in body, path
        for kind in ("expired", "never-issued"):
            status, body, _ = await get(port, path, tokens[kind])
            assert status == 401 and "gangscope_" not in body, (path, kind)
    for open_path in ("/healthz", "/readyz"):
        assert open_path not in guarded and (await get(port, open_path))[0] == 200
    return guarded


@pytest.fixture
def own_account(real_api: RealCluster, tmp_path: Path) -> Any:
    def kubeconfig(name: str) -> str:
        real_api.service_account("gangscope", name)
        return real_api.kubeconfig(tmp_path / name, real_api.token("gangscope", name))
    return kubeconfig


async def test_collector_metrics_auth(real_api: RealCluster, scrapers: dict[str, str], own_account: Any) -> None:
    collector = await started_collector(own_account("gangscope-collector"), "--metrics-auth")
    try:
        guarded = await check_every_guarded_route(collector.port, collector.endpoint.runner.app, scrapers)
        assert "/metrics" in guarded
        status, body, _ = await get(collector.port, "/metrics", scrapers["allowed"])
        counts = {r: series(body)[sample("gangscope_metrics_auth_requests_total", result=r)]
                  for r in ("allowed", "unauthenticated", "forbidden", "error")}
        n = len(guarded)
        assert counts == {"allowed": n + 1, "unauthenticated": 3 * n, "forbidden": n, "error": 0}
    finally:
        await collector.stop()


@pytest.fixture
async def agent(own_account: Any, real_api: RealCluster) -> AsyncIterator[Agent]:
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    args = p.parse_args(["--listen", "127.0.0.1:0", "--node-name", f"auth-{uuid.uuid4().hex[:6]}", "--sample-interval", "0.1",
                         "--pod-resources-socket", "/nonexistent/kubelet.sock", "--discovery-interval", "0.5",
                         "--sysfs", FIXTURE_SYSFS, "--metrics-auth", "--kubeconfig", own_account("gangscope-agent")])
    a = Agent(args, topology_from_args(args)[0], nvml=lambda: SimNvml())
    await a.start()
    yield a
    await a.stop()


async def test_agent_metrics_auth(agent: Agent, scrapers: dict[str, str]) -> None:
    guarded = await check_every_guarded_route(agent.port, agent._endpoint.runner.app, scrapers)
    assert "/metrics" in guarded
    status, body, _ = await get(agent.port, "/metrics", scrapers["allowed"])
    assert status == 200 and series(body)[sample("gangscope_metrics_auth_requests_total", result="error")] == 0
