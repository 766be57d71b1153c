"""``--metrics-auth`` end to end: a collector and an agent ask the simulated API server (over real
HTTP) to review each scraper's bearer token (TokenReview) and its right to ``get /metrics``
(SubjectAccessReview), the way kube-rbac-proxy does. Requests are counted at the server, so the
caching (one review per token per TTL, one per burst) is checked where it costs something.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from exporter.cluster.main import Collector
from exporter.config import topology_from_args
from exporter.errors import CommandError
from exporter.kube.resources import AGENT_NODE, AGENT_PODS, LOCAL_QUEUES, NODES, TOPOLOGIES, WORKLOADS
from exporter.node import main as agent_main
from exporter.node.agent import Agent
from exporter.sim.apiserver import SimApiServer
from exporter.sim.nvml import SimNvml
from kueue_objects import admitted_conditions, sample, series, workload
from collectors import started_collector

PROM = "system:serviceaccount:monitoring:prometheus"
TOKENS = {
    "prom": "prom-token-3b7d",        # a user with the rule
    "grouped": "alice-token-91c2",    # a user whose group has the rule
    "nobody": "bob-token-5e0a",       # known, no rule: 403
    "unknown": "never-issued-7777",   # TokenReview says not authenticated: 401
}


def grant(sim: SimApiServer) -> None:
    sim.add_token_user(TOKENS["prom"], PROM, ["system:serviceaccounts"])
    sim.add_token_user(TOKENS["grouped"], "alice", ["metrics-readers"])
    sim.add_token_user(TOKENS["nobody"], "bob", ["developers"])
    sim.allow_non_resource(PROM, "get", "/metrics")
    sim.allow_non_resource("metrics-readers", "get", "/metrics")
    sim.allow_non_resource("bob", "get", "/healthz")  # a rule for another path grants nothing here


async def get(port: int, path: str = "/metrics", token: str | None = None, header: str | None = None,
              openmetrics: bool = False) -> tuple[int, str, dict[str, str]]:
    headers: dict[str, str] = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if header is not None:
        headers["Authorization"] = header
    if openmetrics:
        headers["Accept"] = "application/openmetrics-text; version=1.0.0"
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}", headers=headers) as r:
        return r.status, await r.text(), dict(r.headers)


def reviews(sim: SimApiServer) -> tuple[int, int]:
    return sim.count("/tokenreviews"), sim.count("/subjectaccessreviews")


@pytest.fixture
async def collector(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> AsyncIterator[Collector]:
    for r in (WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, NODES):
        kube_sim.serve(r)
    kube_sim.create(workload("secret-project", ns="team-x", conditions=admitted_conditions()))
    grant(kube_sim)
    c = await started_collector(kube_sim_kubeconfig, "--metrics-auth")
    yield c
    await c.stop()


async def test_collector_metrics_auth(collector: Collector, kube_sim: SimApiServer) -> None:
    port, sim = collector.port, kube_sim

    # Health endpoints stay open, and cost no review.
    assert (await get(port, "/healthz"))[0] == 200
    assert (await get(port, "/readyz"))[0] == 200
    assert reviews(sim) == (0, 0)

    # No token, another scheme, an empty bearer: 401 with a challenge, nothing asked of the API server.
    for header in (None, "Basic cHJvbTpwcm9t", "Bearer ", "Bearer"):
        status, body, headers = await get(port, header=header)
        assert status == 401 and "gangscope_" not in body
        assert headers["WWW-Authenticate"].startswith("Bearer")
    assert reviews(sim) == (0, 0)

    # A token the API server does not know: 401 after one TokenReview, no SubjectAccessReview.
    status, body, _ = await get(port, token=TOKENS["unknown"])
    assert status == 401 and "secret-project" not in body
    assert reviews(sim) == (1, 0)

    # Known user without the rule: 403.
    status, body, _ = await get(port, token=TOKENS["nobody"])
    assert status == 403 and "secret-project" not in body
    assert reviews(sim) == (2, 1)

    # Allowed user, and a user allowed through a group: 200 with the metrics, in both formats.
    status, body, _ = await get(port, token=TOKENS["prom"])
    assert status == 200 and 'workload="secret-project"' in body
    assert series(body)[sample("gangscope_source_up", source="workloads")] == 1
    status, body, _ = await get(port, token=TOKENS["grouped"], openmetrics=True)
    assert status == 200 and body.endswith("# EOF\n")
    assert "gangscope_workload" in {f.name for f in parse_openmetrics(body)}  # _info is the sample suffix
    assert reviews(sim) == (4, 3)

    # Cached: repeated scrapes, allowed or not, ask the API server nothing more.
    for _ in range(5):
        assert (await get(port, token=TOKENS["prom"]))[0] == 200
        assert (await get(port, token=TOKENS["grouped"]))[0] == 200
        assert (await get(port, token=TOKENS["nobody"]))[0] == 403
        assert (await get(port, token=TOKENS["unknown"]))[0] == 401
    assert reviews(sim) == (4, 3)

    # A burst of scrapes with a new token shares one review.
    sim.add_token_user("burst-token", PROM)
    statuses = await asyncio.gather(*(get(port, token="burst-token") for _ in range(20)))
    assert [s[0] for s in statuses] == [200] * 20
    assert reviews(sim) == (5, 4)

    # API server failing: 503, and the failure is not cached (the next scrape asks again and gets in).
    # The user a successful TokenReview named is kept: after the failed SubjectAccessReview only
    # that one is asked again.
    sim.add_token_user("late-token", PROM)
    sim.fail_next(1, 500, match="/tokenreviews")
    assert (await get(port, token="late-token"))[0] == 503
    sim.fail_next(1, 500, match="/subjectaccessreviews")
    assert (await get(port, token="late-token"))[0] == 503
    assert (await get(port, token="late-token"))[0] == 200
    assert reviews(sim) == (7, 6)

    # Every check is counted by result (the scrape reading the counter is counted before it renders).
    status, body, _ = await get(port, token=TOKENS["prom"])
    got = {r: series(body)[sample("gangscope_metrics_auth_requests_total", result=r)]
           for r in ("allowed", "unauthenticated", "forbidden", "error")}
    assert got == {"allowed": 2 + 10 + 20 + 1 + 1, "unauthenticated": 4 + 1 + 5, "forbidden": 1 + 5, "error": 2}


async def test_collector_metrics_auth_api_server_unreachable(collector: Collector, kube_sim: SimApiServer) -> None:
    """With the API server gone (connection refused), scrapes get 503 and health stays open."""
    port = collector.port
    assert (await get(port, token=TOKENS["prom"]))[0] == 200
    await kube_sim.stop()
    assert (await get(port, token=TOKENS["grouped"]))[0] == 503  # not cached yet: needs the API server
    assert (await get(port, token=TOKENS["prom"]))[0] == 200  # cached within the TTL
    assert (await get(port, "/healthz"))[0] == 200
    assert collector.endpoint.auth is not None and collector.endpoint.auth.counts["error"] == 1


def agent_args(*extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    agent_main.add_arguments(p)
    return p.parse_args(["--listen", "127.0.0.1:0", "--node-name", "gpu-a1", "--sample-interval", "0.1",
                         "--pod-resources-socket", "/nonexistent/kubelet.sock", "--discovery-interval", "0.5",
                         "--sysfs", str(Path(__file__).parent / "fixtures" / "sysfs"), "--metrics-auth", *extra])


async def test_agent_metrics_auth(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    kube_sim.serve(AGENT_NODE)
    kube_sim.serve(AGENT_PODS)
    grant(kube_sim)
    args = agent_args("--kubeconfig", kube_sim_kubeconfig)
    agent = Agent(args, topology_from_args(args)[0], nvml=lambda: SimNvml())
    await agent.start()
    try:
        port = agent.port
        assert (await get(port, "/healthz"))[0] == 200
        assert (await get(port, "/readyz"))[0] == 200
        status, body, _ = await get(port, "/")
        assert status == 200 and "gangscope agent on gpu-a1" in body and "gangscope_" not in body
        assert (await get(port, "/no-such-route"))[0] == 401
        assert (await get(port, "/debug/explain?namespace=a&name=b"))[0] == 401  # not served here: no hint either
        assert reviews(kube_sim) == (0, 0)
        assert (await get(port))[0] == 401
        assert (await get(port, token=TOKENS["unknown"]))[0] == 401
        assert (await get(port, token=TOKENS["nobody"]))[0] == 403
        for _ in range(3):
            status, body, _ = await get(port, token=TOKENS["prom"])
            assert status == 200 and "gangscope_source_up" in body
        assert reviews(kube_sim) == (3, 2)
        got = series(body)
        assert got[sample("gangscope_metrics_auth_requests_total", result="allowed")] == 3
        assert got[sample("gangscope_metrics_auth_requests_total", result="forbidden")] == 1
        assert got[sample("gangscope_metrics_auth_requests_total", result="unauthenticated")] == 2 + 2  # + the two above
    finally:
        await agent.stop()


async def test_agent_metrics_auth_without_kubernetes_refuses_to_start(tmp_path: Path) -> None:
    """No API access means no way to review tokens: refuse to start rather than serve /metrics open."""
    args = agent_args("--kubeconfig", str(tmp_path / "missing"))
    agent = Agent(args, topology_from_args(args)[0], nvml=lambda: SimNvml())
    try:
        with pytest.raises(CommandError, match="--metrics-auth needs access to the Kubernetes API"):
            await agent.start()
    finally:
        await agent.stop()


# --- every route, and the namespace check of /debug/explain --------------------------------------

ROUTE_TOKENS = {
    "carol": "carol-token-0d4f",  # may get /metrics and /debug/explain, no Workloads anywhere
    "dave": "dave-token-6a1b",    # through a group: /debug/explain and Workloads in team-y only
    "erin": "erin-token-c3e9",    # /debug/explain and Workloads in every namespace (a ClusterRoleBinding)
}
EXPLAIN_X = "/debug/explain?namespace=team-x&name=secret-project"
EXPLAIN_Y = "/debug/explain?namespace=team-y&name=open-project"


def grant_routes(sim: SimApiServer) -> None:
    sim.add_token_user(ROUTE_TOKENS["carol"], "carol", ["sre"])
    sim.add_token_user(ROUTE_TOKENS["dave"], "dave", ["team-y-devs"])
    sim.add_token_user(ROUTE_TOKENS["erin"], "erin")
    for subject in ("carol", "team-y-devs", "erin"):
        sim.allow_non_resource(subject, "get", "/debug/explain")
    sim.allow_non_resource("carol", "get", "/metrics")
    sim.allow_resource("team-y-devs", "get", "kueue.x-k8s.io", "workloads", "team-y")
    sim.allow_resource("team-y-devs", "list", "kueue.x-k8s.io", "workloads", "team-x")  # list is not get
    sim.allow_resource("erin", "get", "kueue.x-k8s.io", "workloads")


async def test_every_route_but_the_probes_and_landing_page_is_guarded(collector: Collector, kube_sim: SimApiServer) -> None:
    """Each route with no token, with a token allowed only /metrics, and with a token allowed
    /metrics and /debug/explain but not to read the namespace's Workloads."""
    kube_sim.create(workload("open-project", ns="team-y", conditions=admitted_conditions()))
    grant_routes(kube_sim)
    port = collector.port
    routes = ["/metrics", EXPLAIN_X, "/", "/healthz", "/readyz", "/no-such-route"]
    expected = {
        None: [401, 401, 200, 200, 200, 401],
        TOKENS["prom"]: [200, 403, 200, 200, 200, 404],          # /metrics only
        ROUTE_TOKENS["carol"]: [200, 403, 200, 200, 200, 404],   # /metrics and the route, not team-x's Workloads
    }
    for token, statuses in expected.items():
        got = []
        for path in routes:
            status, body, _ = await get(port, path, token=token)
            got.append(status)
            if status != 200 or path == "/":
                assert "secret-project" not in body, (token, path)
        assert got == statuses, token

    # Allowed to read team-y's Workloads (through a group): explain answers there, and only there.
    status, body, _ = await get(port, EXPLAIN_Y, token=ROUTE_TOKENS["dave"])
    assert status == 200 and json.loads(body)["target"]["name"] == "open-project"
    assert (await get(port, EXPLAIN_X, token=ROUTE_TOKENS["dave"]))[0] == 403  # only `list` there
    assert (await get(port, "/metrics", token=ROUTE_TOKENS["dave"]))[0] == 403
    # Allowed everywhere: the Workload's diagnosis, Kueue's words included.
    status, body, _ = await get(port, EXPLAIN_X, token=ROUTE_TOKENS["erin"])
    assert status == 200 and json.loads(body)["target"]["name"] == "secret-project"
    # Malformed requests are refused before the namespace check, and cost no review.
    before = reviews(kube_sim)
    assert (await get(port, "/debug/explain?namespace=team-x", token=ROUTE_TOKENS["erin"]))[0] == 400
    assert reviews(kube_sim) == before

    # The namespace decision is cached per token and namespace, like the route's.
    for _ in range(3):
        assert (await get(port, EXPLAIN_X, token=ROUTE_TOKENS["carol"]))[0] == 403
        assert (await get(port, EXPLAIN_Y, token=ROUTE_TOKENS["dave"]))[0] == 200
    assert reviews(kube_sim) == before

    status, body, _ = await get(port, token=TOKENS["prom"])
    forbidden = series(body)[sample("gangscope_metrics_auth_requests_total", result="forbidden")]
    # prom and carol on team-x's explain, dave on team-x's explain and on /metrics, carol thrice more
    assert forbidden == 2 + 2 + 3


async def test_explain_namespace_check_fails_closed(collector: Collector, kube_sim: SimApiServer) -> None:
    """A SubjectAccessReview that fails on the namespace check: 503, not an answer."""
    grant_routes(kube_sim)
    port = collector.port
    assert (await get(port, EXPLAIN_X, token=ROUTE_TOKENS["erin"]))[0] == 200
    kube_sim.add_token_user("erin-2", "erin")
    sim_sars = reviews(kube_sim)[1]
    kube_sim.fail_next(1, 500, match="/subjectaccessreviews")
    assert (await get(port, "/metrics", token=ROUTE_TOKENS["erin"]))[0] == 503  # the route's own check failed
    kube_sim.fail_next(1, 500, match="/subjectaccessreviews")
    # erin's route decision is cached; the namespace check for team-y is new and fails
    status, _, _ = await get(port, "/debug/explain?namespace=team-y&name=anything", token=ROUTE_TOKENS["erin"])
    assert status == 503
    assert reviews(kube_sim)[1] == sim_sars + 2
