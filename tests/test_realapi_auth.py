"""``--metrics-auth`` with the real TokenReview and SubjectAccessReview of kube-apiserver: the
collector and the agent run as their own ServiceAccounts with the project's RBAC
(``deploy/base/rbac.yaml``: they may create both reviews), and callers present real
ServiceAccount tokens. On every route the guard covers (found by asking each route without a
token): a token whose user holds the project's reader roles gets in; one allowed ``/metrics``
only is refused ``/debug/explain``, and one allowed that path but not Workloads in the namespace
asked about is refused too; a valid token without any right gets 403; no token, a token the
server never issued and an expired one get 401. The open routes stay open."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from exporter.config import topology_from_args
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.sim.nvml import SimNvml
from collectors import started_collector
from kueue_objects import admitted_conditions, sample, series, workload
from realapi import RealCluster, Writer, token_claims
from waiting import eventually

FIXTURE_SYSFS = str(Path(__file__).parent / "fixtures" / "sysfs")


async def get(port: int, path: str, token: str | None = None) -> tuple[int, str, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}", headers=headers) as r:
        return r.status, await r.text(), dict(r.headers)


READ_WORKLOADS = [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get"]}]


@pytest.fixture
def callers(real_api: RealCluster) -> Iterator[tuple[str, dict[str, str]]]:
    """A namespace holding one Workload, and tokens: a reader of everything (the project's
    gangscope-metrics-reader and gangscope-explain-reader, and get on Workloads in the namespace),
    one allowed /metrics only, one allowed /debug/explain but no Workloads, a stranger, an expired
    token of the reader and one the server never issued."""
    ns = real_api.namespace(f"monitoring-{uuid.uuid4().hex[:6]}")
    writer = Writer(real_api)
    writer.create(workload("visible", ns, hosts=[], conditions=admitted_conditions()))
    readers = ["gangscope-metrics-reader", "gangscope-explain-reader"]
    real_api.service_account(ns, "reader", cluster_roles=readers, namespace_rules=READ_WORKLOADS)
    real_api.service_account(ns, "prometheus", cluster_roles=readers[:1])
    real_api.service_account(ns, "no-workloads", cluster_roles=readers)
    real_api.service_account(ns, "stranger")
    expired = real_api.expired_token(ns, "reader")
    assert token_claims(expired)["sub"] == f"system:serviceaccount:{ns}:reader"
    forged = expired.rsplit(".", 1)[0] + ".c2lnbmF0dXJl"
    for token, why in ((expired, "expired"), (forged, "invalid bearer token")):
        review = real_api.admin.request("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        assert review["status"].get("authenticated") is not True and why in review["status"]["error"], review["status"]
    yield ns, {name: real_api.token(ns, name) for name in ("reader", "prometheus", "no-workloads", "stranger")} | {
        "expired": expired, "never-issued": forged}
    writer.cleanup()


def routes(app: Any) -> list[str]:
    return sorted({r.resource.canonical for r in app.router.routes() if r.method == "GET"})


async def check_every_guarded_route(port: int, app: Any, ns: str, tokens: dict[str, str]) -> list[str]:
    """Ask each route as each caller; returns the guarded routes."""
    guarded = []
    for route in routes(app):
        path = f"{route}?namespace={ns}&name=visible" if route == "/debug/explain" else route
        status, body, headers = await get(port, path)
        if status != 401:
            assert route in ("/", "/healthz", "/readyz"), f"{route} answers {status} without a token"
            continue
        guarded.append(route)
        assert headers["WWW-Authenticate"].startswith("Bearer") and "visible" not in body
        status, body, _ = await get(port, path, tokens["reader"])
        assert status == 200 and ("gangscope_" in body or '"visible"' in body), (route, status, body[:200])
        metrics_only = 200 if route == "/metrics" else 403
        assert (await get(port, path, tokens["prometheus"]))[0] == metrics_only, route
        if route == "/debug/explain":  # allowed the path, not the namespace's Workloads
            assert (await get(port, path, tokens["no-workloads"]))[0] == 403
        for kind, want in (("stranger", 403), ("expired", 401), ("never-issued", 401)):
            status, body, _ = await get(port, path, tokens[kind])
            assert status == want and "visible" not in body, (route, kind, status)
    for open_path in ("/healthz", "/readyz"):
        assert (await get(port, open_path))[0] == 200
    return guarded


@pytest.fixture
def own_account(real_api: RealCluster, tmp_path: Path) -> Any:
    def kubeconfig(name: str) -> str:
        real_api.service_account("gangscope", name)
        return real_api.kubeconfig(tmp_path / name, real_api.token("gangscope", name))
    return kubeconfig


async def test_collector_metrics_auth(real_api: RealCluster, callers: tuple[str, dict[str, str]], own_account: Any) -> None:
    ns, tokens = callers
    collector = await started_collector(own_account("gangscope-collector"), "--metrics-auth")
    try:
        await eventually(lambda: collector.store.workload(ns, "visible") is not None, timeout=10)
        guarded = await check_every_guarded_route(collector.port, collector.endpoint.runner.app, ns, tokens)
        assert {"/metrics", "/debug/explain"} <= set(guarded)
        status, body, _ = await get(collector.port, "/metrics", tokens["reader"])
        counts = {r: series(body)[sample("gangscope_metrics_auth_requests_total", result=r)]
                  for r in ("unauthenticated", "error")}
        assert counts == {"unauthenticated": 3 * len(guarded), "error": 0}  # none, expired, never issued
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


async def test_agent_metrics_auth(agent: Agent, callers: tuple[str, dict[str, str]]) -> None:
    ns, tokens = callers
    guarded = await check_every_guarded_route(agent.port, agent._endpoint.runner.app, ns, tokens)
    assert "/metrics" in guarded
    status, body, _ = await get(agent.port, "/metrics", tokens["reader"])
    assert status == 200 and series(body)[sample("gangscope_metrics_auth_requests_total", result="error")] == 0
