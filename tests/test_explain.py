"""``gangscope explain``: a job held at each layer, offline on a dump and live against the
simulated API server, in text and JSON; the collector's /debug/explain route; Prometheus."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml
from aiohttp import web

from exporter import explain
import realprom
from exporter.kube.resources import COLLECTOR_RESOURCES
from exporter.server import start_server, bound_port
from exporter.sim.apiserver import SimApiServer
from exporter.sim.scenario import build_default

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(autouse=True)
def _reset_logging() -> Any:
    """explain.run configures structlog on the (captured) stderr; later tests must not log into a closed file."""
    yield
    structlog.reset_defaults()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    explain.add_arguments(p)
    return p


@pytest.fixture(scope="module")
def scenario() -> Any:
    return build_default(NOW)


@pytest.fixture(scope="module")
def dump(tmp_path_factory: pytest.TempPathFactory, scenario: Any) -> Path:
    """The scenario as a kubectl List, plus vit-large's first timeline step (a node failed)."""
    path = tmp_path_factory.mktemp("dump") / "cluster.yaml"
    node_failed = next(obj for _, _, obj in scenario.timeline if obj["status"].get("unhealthyNodes"))
    docs = [{"apiVersion": "v1", "kind": "List", "items": scenario.all_objects()}, node_failed]
    path.write_text(yaml.safe_dump_all(docs))
    return path


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = explain.run(parser().parse_args(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(dump: Path, target: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    rc, out, err = run_cli([target, "--from-file", str(dump), "--output", "json"], capsys)
    assert rc == 0, err
    return json.loads(out)


def statuses(doc: dict[str, Any]) -> list[str]:
    return [layer["status"] for layer in doc["layers"]]


@pytest.mark.parametrize("target, status", [
    ("ml-team/gpt-pretrain", "inadmissible"),
    ("ml-team/bert-finetune", "queued"),
    ("research/sd-xl", "admission_checks"),
    ("ml-team/llama-ablation", "deactivated"),
])
def test_admission_layer_holds(dump: Path, target: str, status: str, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(dump, target, capsys)
    assert doc["schema"] == "gangscope.explain/v1"
    assert doc["verdict"]["status"] == "held" and doc["verdict"]["layer"] == "admission"
    assert statuses(doc) == ["blocking", "not_reached", "not_reached", "not_reached", "not_reached", "not_reached"]
    assert doc["layers"][0]["evidence"]["stage"] == status
    assert doc["target"]["resolved_as"] == "owner"  # the scenario's Job names are the owner names


def test_admission_evidence_names_the_quota_message(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(dump, "ml-team/gpt-pretrain", capsys)
    ev = doc["layers"][0]["evidence"]
    assert ev["cluster_queue"] == "gpu-cluster-queue" and ev["local_queue"] == "ml-team-queue"
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100-tas, 64 more needed" in doc["verdict"]["summary"]
    timed_out = run_json(dump, "research/whisper-asr", capsys)["layers"][0]
    assert timed_out["evidence"]["evictions"] == [{"reason": "PodsReadyTimeout", "underlying_cause": "WaitForStart", "count": 1}]
    assert timed_out["evidence"]["requeue"]["count"] == 1
    assert "requeued 1x, next retry" in timed_out["summary"]


def test_placement_layer_holds_on_an_unhealthy_node(dump: Path, scenario: Any, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(dump, "research/vit-large", capsys)
    assert doc["verdict"]["layer"] == "placement"
    assert statuses(doc) == ["ok", "blocking", "not_reached", "not_reached", "not_reached", "not_reached"]
    ev = doc["layers"][1]["evidence"]
    assert ev["unhealthy_nodes"] == [{"node": "gpu-b2-r2-n2", "path": {"block": "block-2", "rack": "rack-2-2", "host": "gpu-b2-r2-n2"}}]
    assert ev["assignments"][0]["by_level"]["rack"] == {"rack-2-2": 4}
    assert "gpu-b2-r2-n2" in doc["verdict"]["summary"]


def test_assembly_layer_holds_a_stuck_gang(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(dump, "ml-team/mixtral-sft", capsys)
    assert doc["verdict"] == {"status": "held", "layer": "assembly", "summary": doc["layers"][2]["summary"]}
    assert statuses(doc) == ["ok", "ok", "blocking", "not_reached", "not_reached", "not_reached"]
    gang = doc["layers"][2]["evidence"]["podgroups"][0]
    assert (gang["stage"], gang["stuck"], gang["join_key"]) == ("stuck", True, "template")
    assert gang["podgroup"]["phase"] == "Scheduling" and gang["podgroup"]["min_member"] == 4
    # Coscheduling has no phase timestamp and a dump shows the phase for the first time: no "since".
    assert doc["verdict"]["summary"].startswith(
        "stuck assembling: PodGroup mixtral-sft (coscheduling), Scheduling, 0/4 running (live pods: 4 pending); ")
    assert "timeout 600s passed" in doc["verdict"]["summary"]


def test_assembly_layer_names_idle_gpus_of_a_partial_gang(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(dump, "research/t5-pretrain", capsys)
    gang = doc["layers"][2]["evidence"]["podgroups"][0]
    assert (gang["stage"], gang["idle_gpus"], gang["gpus_per_pod"]) == ("partially_bound", 16, 8)
    assert "2/4 running" in doc["verdict"]["summary"] and "16 GPUs idle" in doc["verdict"]["summary"]


def test_podgroup_name_resolves_to_its_workload(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    by_pg = run_json(dump, "ml-team/mixtral-sft", capsys)
    wl_name = by_pg["workload"]["name"]
    by_wl = run_json(dump, f"ml-team/{wl_name}", capsys)
    assert by_wl["target"]["resolved_as"] == "workload"
    assert by_wl["verdict"] == by_pg["verdict"]


def test_running_job_without_prometheus_prints_the_query(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(dump, "ml-team/llama-train", capsys)
    assert statuses(doc) == ["ok", "ok", "ok", "unknown", "ok", "unknown"]
    assert doc["verdict"]["status"] == "running"  # admitted, placed, assembled; interconnect not checked
    assert doc["verdict"]["summary"].startswith("admitted, placed and assembled; interconnect not checked: run with --prometheus")
    q = doc["layers"][3]["evidence"]["queries"]
    wl = doc["workload"]["name"]
    assert q["nvlink_now"] == (
        "(sum by (node, gpu) (rate(gangscope_nvlink_transmit_bytes_total[300s])) + sum by (node, gpu) "
        "(rate(gangscope_nvlink_receive_bytes_total[300s]))) * on (node, gpu) max by (node, gpu) "
        f'(gangscope_gpu_pod_info{{namespace="ml-team", workload="{wl}"}})')
    assert "[3600s] @ " in q["nvlink_first_hour"]  # tests/test_interconnect.py runs them on a real Prometheus


def test_text_prints_each_query_whole_on_a_line_of_its_own(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Prose wraps at spaces; a query is never cut, so that it can be pasted."""
    doc = run_json(dump, "ml-team/llama-train", capsys)
    rc, out, _ = run_cli(["ml-team/llama-train", "--from-file", str(dump)], capsys)
    assert rc == 0
    lines = out.splitlines()
    for query in doc["layers"][3]["evidence"]["queries"].values():
        assert query in lines
    text = explain.render_text({**doc, "layers": [{**doc["layers"][0], "summary": "word " * 30 + "x" * 150}]}, False, 80)
    assert any(line.strip() == "x" * 150 for line in text.splitlines())


def test_finished_job(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = run_json(dump, "ml-team/resnet-eval", capsys)
    assert doc["verdict"]["status"] == "finished"
    assert statuses(doc) == ["ok", "not_reached", "not_reached", "not_reached", "not_reached", "not_reached"]


def test_text_output_is_short_aligned_and_plain_off_a_tty(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(["ml-team/mixtral-sft", "--from-file", str(dump)], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("ml-team/mixtral-sft  (Workload job-mixtral-sft-")
    assert lines[1] == "verdict: held at ASSEMBLY"
    layer_lines = [l for l in lines[3:] if l[2:3] != " "]  # continuation lines are indented further
    assert [l.split()[0] for l in layer_lines] == ["admission", "placement", "assembly", "interconnect", "job", "training"]
    assert all(len(l) <= 100 for l in lines[1:])
    assert len({l.index(l.split()[1]) for l in layer_lines}) == 1  # the status column is aligned
    assert layer_lines[2].split()[1] == "BLOCKING"
    assert "\x1b[" not in out


def test_text_colour_on_a_tty() -> None:
    doc = {"target": {"namespace": "n", "name": "x"}, "workload": None,
           "verdict": {"status": "held", "layer": "assembly", "summary": "s"},
           "layers": [{"name": n, "status": "blocking" if n == "assembly" else "ok", "summary": "s", "evidence": {}}
                      for n in explain.LAYERS]}
    text = explain.render_text(doc, colour=True)
    assert "\x1b[31;1mBLOCKING\x1b[0m" in text


def test_unknown_name_exits_1(dump: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_cli(["ml-team/nope", "--from-file", str(dump)], capsys)
    assert (rc, out) == (1, "")
    assert "ml-team/nope: no Kueue Workload, owner job of a Workload, or PodGroup of that name" in err
    rc, _, err = run_cli(["nonamespace", "--from-file", str(dump)], capsys)
    assert rc == 2 and "NAMESPACE/NAME" in err


def _gangs_for(dump: Path) -> tuple[Any, Any]:
    args = parser().parse_args(["x/y", "--from-file", str(dump)])
    store, gangs, handlers = explain._build(args)
    from exporter.loader import feed, load_path

    feed(store.exposition, handlers, load_path(dump).objects, "test")
    return store, gangs


@pytest.mark.slow
@pytest.mark.skipif(not realprom.AVAILABLE, reason="needs Debian's prometheus and promtool (scripts/setup-env)")
async def test_interconnect_names_the_straggler_from_a_real_prometheus(dump: Path, tmp_path: Path) -> None:
    """llama-train's 4 nodes x 8 GPUs since it started, GPU 5 of its second node at 30%: the
    verdict is slow, at the interconnect, naming that GPU (exact rates: tests/test_interconnect.py)."""
    store, gangs = _gangs_for(dump)
    wl = store.workloads_by_owner_name("ml-team", "llama-train")[0]
    start = explain.running_since(wl)
    assert start is not None
    now = int(NOW.timestamp()) // 15 * 15
    nodes = [f"gpu-b1-r1-n{i}" for i in range(1, 5)]

    def samples() -> Any:
        for node in nodes:
            def rate(g: int, t: float, node: str = node) -> float:
                return 5e9 * (0.3 if (node, g) == (nodes[1], 5) else 1.0)
            yield from realprom.gpu_samples("ml-team", wl.name, node, 8, int(start) // 15 * 15 - 300, now, rate, (rate, rate))
        yield from realprom.stage_samples("ml-team", wl.name, int(start) // 15 * 15 - 300, now)

    with realprom.prometheus_with(tmp_path, realprom.openmetrics(realprom.GPU_FAMILIES, samples())) as url:
        doc = await explain.diagnose(store, gangs, "ml-team", "llama-train", prometheus=url, now=now)
    assert (doc["verdict"]["status"], doc["verdict"]["layer"]) == ("slow", "interconnect")
    assert doc["verdict"]["summary"].startswith("straggler: nvlink 626.00 GB/s now vs 626.00 GB/s baseline (100%); "
                                                "GPU 5 on node gpu-b1-r1-n2 lags at 30% of the gang's median GPU")
    assert doc["layers"][3]["evidence"]["baseline"]["first_hour"] is True


async def test_unreachable_prometheus_is_reported_not_raised(dump: Path) -> None:
    store, gangs = _gangs_for(dump)
    doc = await explain.diagnose(store, gangs, "ml-team", "llama-train", prometheus="http://127.0.0.1:9")
    assert doc["layers"][3]["status"] == "unknown"
    assert doc["layers"][3]["summary"] == ("Prometheus query failed: cannot reach Prometheus at http://127.0.0.1:9: "
                                           "Connect call failed ('127.0.0.1', 9); check the URL and that Prometheus is running")


async def test_debug_explain_route(dump: Path) -> None:
    import aiohttp

    store, gangs = _gangs_for(dump)
    app = web.Application()
    app.add_routes([explain.explain_route(store, gangs)])
    runner = await start_server(app, "127.0.0.1:0")
    base = f"http://127.0.0.1:{bound_port(runner)}/debug/explain"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(base, params={"namespace": "research", "name": "t5-pretrain"}) as r:
                assert r.status == 200
                compact = await r.text()
                doc = json.loads(compact)
            async with s.get(base, params={"namespace": "research", "name": "t5-pretrain", "pretty": ""}) as r:
                pretty = await r.text()
            async with s.get(base, params={"namespace": "research", "name": "t5-pretrain"},
                             headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}) as r:  # a browser
                browser = await r.text()
            async with s.get(base, params={"namespace": "research", "name": "nope"}) as r:
                assert r.status == 404
            async with s.get(base) as r:
                assert r.status == 400
    finally:
        await runner.cleanup()
    assert doc["verdict"]["layer"] == "assembly"
    assert doc["layers"][2]["evidence"]["podgroups"][0]["stage"] == "partially_bound"
    assert "\n" not in compact.strip()
    for text in (pretty, browser):
        assert text.startswith('{\n  "schema": "gangscope.explain/v1",\n')
        assert json.loads(text)["verdict"]["layer"] == "assembly"


async def test_live_against_the_simulated_api_server(scenario: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = SimApiServer(bookmark_interval=0.2)
    await sim.start()
    try:
        for r in COLLECTOR_RESOURCES:
            sim.serve(r)
        sim.bulk_load([o for o in scenario.all_objects() if o["kind"] != "Pod"])
        kubeconfig = sim.write_kubeconfig(str(tmp_path / "kubeconfig"))
        results, docs = {}, {}
        for target in ("ml-team/gpt-pretrain", "ml-team/mixtral-sft", "research/t5-pretrain", "ml-team/llama-70b-sft"):
            args = parser().parse_args([target, "--kubeconfig", kubeconfig, "--output", "json", "--sync-timeout", "10"])
            rc = await asyncio.to_thread(explain.run, args)
            out, err = capsys.readouterr()
            assert rc == 0, err
            docs[target] = json.loads(out)
            results[target] = docs[target]["verdict"]["layer"]
        # A user who may list Workloads only in ml-team: the verdict stays, the numbers need the cluster.
        sim.namespace_rbac[("kueue.x-k8s.io", "workloads")] = {"ml-team"}
        args = parser().parse_args(["ml-team/llama-70b-sft", "--kubeconfig", kubeconfig, "--output", "json", "--sync-timeout", "5"])
        rc = await asyncio.to_thread(explain.run, args)
        out, err = capsys.readouterr()
        limited = json.loads(out)
    finally:
        await sim.stop()
    assert results == {"ml-team/gpt-pretrain": "admission", "ml-team/mixtral-sft": "assembly", "research/t5-pretrain": "assembly",
                       "ml-team/llama-70b-sft": "placement"}
    # live, Kueue's word first, then the fit against the Workload's own ClusterQueue (the
    # scenario serves its ClusterQueues, which explain lists with the cluster's Nodes)
    placement = next(layer for layer in docs["ml-team/llama-70b-sft"]["layers"] if layer["name"] == "placement")
    assert placement["summary"] == ("Kueue: no topology placement: couldn't assign flavors to pod set main: topology "
                                    "\"gpu-topology\" allows to fit only 2 out of 3 pod(s). no single domain fits (main: "
                                    "topology \"gpu-topology\" allows to fit only 2 out of 3 pod(s). Total nodes: 22; "
                                    "excluded: nodeSelector: 16, resource \"memory\": 3), but the flavor h100-tas would hold it with the "
                                    "level dropped: fragmented"), placement["summary"]
    assert rc == 0 and "workloads not readable cluster-wide" in err, err
    assert limited["verdict"]["layer"] == "placement"
    assert not next(layer for layer in limited["layers"] if layer["name"] == "placement")["evidence"]["fit"]


def test_an_unreachable_api_server_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def closed_port_kubeconfig() -> tuple[str, str]:
        sim = SimApiServer()
        await sim.start()
        path = sim.write_kubeconfig(str(tmp_path / "kubeconfig"))
        await sim.stop()
        return path, sim.url

    path, url = asyncio.run(closed_port_kubeconfig())
    rc, out, err = run_cli(["ml-team/llama-train", "--kubeconfig", path, "--sync-timeout", "1"], capsys)
    assert (rc, out) == (1, "")
    assert err == (f"gangscope explain: cannot read the cluster: cannot reach the API server at {url}: Connection refused: "
                   "check the kubeconfig's server (in a pod: KUBERNETES_SERVICE_HOST), that the API server is up, and the "
                   "network path to it\n")


def test_an_unreachable_or_wrong_prometheus_is_one_sentence_and_no_healthy_verdict(
        dump: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A running job with --prometheus that does not answer (a closed port; a server that is not
    Prometheus): each layer that needed it says why in one sentence, the verdict is not "running",
    the command says it once on stderr and exits 1."""
    rc, out, err = run_cli(["ml-team/llama-train", "--from-file", str(dump), "--prometheus", "http://127.0.0.1:9",
                            "--output", "json"], capsys)
    doc = json.loads(out)
    assert rc == 1 and doc["verdict"]["status"] == "unknown", doc["verdict"]
    training = next(layer for layer in doc["layers"] if layer["name"] == "training")
    assert training["summary"] == ("not checked: cannot reach Prometheus at http://127.0.0.1:9: Connect call failed "
                                   "('127.0.0.1', 9); check the URL and that Prometheus is running")
    assert err.strip().splitlines() == ["gangscope explain: cannot reach Prometheus at http://127.0.0.1:9: Connect call "
                                        "failed ('127.0.0.1', 9); check the URL and that Prometheus is running"]

    async def not_prometheus() -> tuple[int, str, str]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", lambda _: web.Response(text="<html>grafana</html>", content_type="text/html"))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            return await asyncio.to_thread(run_cli, ["ml-team/llama-train", "--from-file", str(dump), "--prometheus",
                                                     f"http://127.0.0.1:{port}"], capsys)
        finally:
            await runner.cleanup()

    rc, out, err = asyncio.run(not_prometheus())
    assert rc == 1 and "verdict" in out and "running" not in out.split("verdict", 1)[1].splitlines()[0], out
    assert len(err.strip().splitlines()) == 1 and "answered HTTP 200 (text/html), not Prometheus's query API" in err, err
