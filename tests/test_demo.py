"""``gangscope demo``: the real command runs, reports what a newcomer needs, and leaves nothing behind;
and while it runs, its collector and agents serve the scenario's joined series.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from exporter.demo import Demo
from exporter.sim.scenario import gpu_uuid

PROMETHEUS = Path("/usr/bin/prometheus")


def gangscope_command() -> list[str]:
    """The installed console script next to the interpreter, else ``python -m exporter``."""
    script = Path(sys.executable).parent / "gangscope"
    return [str(script)] if script.exists() else [sys.executable, "-m", "exporter"]


def run_demo(*extra: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], list[psutil.Process]]:
    """Runs the demo in its own session; returns its result and whatever of that session survived it.

    A session of its own lets the test find every process the demo started (Prometheus included)
    after it exited, and kill exactly those if the demo hangs or leaks.
    """
    proc = subprocess.Popen(
        [*gangscope_command(), "demo", "--duration", "3", "--scenario", "static", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "GANGSCOPE_LOG_LEVEL": "warning"},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"gangscope demo did not exit within {timeout} s; output:\n{out}\n{err}")
    survivors = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == proc.pid:
                survivors.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    for p in survivors:  # only what our own demo started; reported by the test below
        p.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), survivors


def test_demo_command_reports_and_exits_clean() -> None:
    started = time.monotonic()
    result, survivors = run_demo()
    assert result.returncode == 0, result.stderr
    assert not survivors, f"processes left behind: {survivors}"
    out = result.stdout
    collector = re.search(r"^  collector\s+(http://127\.0\.0\.1:\d+/metrics)$", out, re.M)
    assert collector, out
    assert re.search(r"^  agents\s+27 nodes, e\.g\. gpu-b1-r1-n1: http://127\.0\.0\.1:\d+/metrics$", out, re.M), out
    # The static scenario: no timeline, so the stages are those the scenario builds.
    table = re.search(r"^  workloads by stage:\n((?:    \S+ +\d+\n)+)", out, re.M)
    assert table, out
    stages = {line.split()[0]: int(line.split()[1]) for line in table.group(1).splitlines()}
    assert stages == {"admission_checks": 1, "assembling": 2, "backoff": 1, "deactivated": 1, "finished": 1,
                      "inadmissible": 2, "preempting": 1, "queued": 1, "running": 8}
    # block-4's free GPUs are scattered: Kueue found no rack for llama-70b-sft, and gangscope's fit for
    # the flavors of its ClusterQueue finds the same: 2 of 3 pods in one rack, all 3 with the level dropped.
    llama = " ".join(out.split("$ gangscope explain ml-team/llama-70b-sft\n", 1)[1].split())
    assert llama.startswith("ml-team/llama-70b-sft (Workload job-llama-70b-sft-"), llama[:200]
    assert ("verdict: held at PLACEMENT admission ok quota available in gpu-cluster-queue (queue ml-team-queue), but no "
            "topology domain fits: see placement placement BLOCKING Kueue: no topology placement: couldn't assign flavors "
            "to pod set main: topology \"gpu-topology\" allows to fit only 2 out of 3 pod(s). no single domain fits (main: "
            "topology \"gpu-topology\" allows to fit only 2 out of 3 pod(s). Total nodes: 22; excluded: nodeSelector: 16, "
            "resource \"memory\": 3), but the flavor h100-tas would hold it with the level dropped: fragmented") in llama, llama[:600]
    # a job as Kueue shows it without waitForPodsReady, one waiting for preemptions, one held by a check
    gemma = out.split("$ gangscope explain research/gemma-eval\n", 1)[1]
    assert gemma.splitlines()[1] == "verdict: running", gemma[:300]
    assert "Kueue writes no PodsReady here" in " ".join(gemma.split())
    qwen = out.split("$ gangscope explain ml-team/qwen-pretrain\n", 1)[1]
    assert "preempting in gpu-cluster-queue (queue ml-team-queue): waiting for" in " ".join(qwen.split())
    assert "position 1 of 4 in gpu-cluster-queue" in " ".join(qwen.split())  # with llama-70b-sft, four wait there
    sdxl = out.split("$ gangscope explain research/sd-xl\n", 1)[1]
    assert "admission check dws-prov is Pending (Provisioning Request was successfully queued.), retried 1x" in " ".join(sdxl.split())
    explain = out.split("$ gangscope explain ml-team/mixtral-sft\n", 1)
    assert len(explain) == 2, out
    assert explain[1].splitlines()[1] == "verdict: held at ASSEMBLY", explain[1][:500]
    assert re.search(r"^  assembly +BLOCKING +stuck assembling: PodGroup mixtral-sft", explain[1], re.M), explain[1][:800]
    # the gangs and jobs of the other APIs: a KAI gang its queue's limit keeps out, a 1.37 composite
    # gang, a TrainJob whose progress stopped, a JobSet that restarted
    kai = " ".join(out.split("$ gangscope explain vision/sam-finetune\n", 1)[1].split())
    assert "stuck assembling: PodGroup sam-finetune (kai), Unschedulable since" in kai
    assert "scheduler: OverLimit: vision-queue quota has reached the allowable limit of GPUs." in kai
    moe = " ".join(out.split("$ gangscope explain ml-team/moe-pipeline\n", 1)[1].split())
    assert "moe-pipeline assembled (2/2 child groups assembled (moe-pipeline-experts assembled, moe-pipeline-router " \
           "assembled))" in moe
    sft = out.split("$ gangscope explain ml-team/gemma-sft\n", 1)[1]
    assert sft.splitlines()[1] == "verdict: running but SLOW (job)"
    assert "TrainJob gemma-sft progress stale for 40m (62% since" in " ".join(sft.split())
    gb200 = " ".join(out.split("$ gangscope explain ml-team/llama-gb200\n", 1)[1].split())
    assert "job ok JobSet llama-gb200 (4 restarts in rack-3-1)" in gb200
    assert "At +20 s" not in out, "the static scenario announces a timeline it does not play"
    assert "workloads by stage at the end: admission_checks=1, assembling=2" in out
    # Its temporary folder (kubeconfig, kubelet sockets) is gone.
    kubeconfig = re.search(r"^  kubeconfig  (\S+)", out, re.M)
    assert kubeconfig and not Path(kubeconfig.group(1)).parent.exists()
    # The explain command it prints runs in the user's shell as printed (its path, not a bare
    # "gangscope" that only an activated venv has).
    printed = re.search(r"^ {14}(.+) explain NS/NAME --kubeconfig (\S+)$", out, re.M)
    assert printed and printed.group(2) == kubeconfig.group(1), out
    again = subprocess.run([*printed.group(1).split(), "--version"], capture_output=True, text=True, timeout=60, cwd="/")
    assert again.returncode == 0 and again.stdout.startswith("gangscope "), again
    assert time.monotonic() - started < 30


# What the demo promises a newcomer: these fire within two minutes of its start.
PROMISED = ("GangscopeWorkloadInadmissible", "GangscopeGangStuckAssembling", "GangscopeGangIdleGPUs",
            "GangscopeNVLinkDown", "GangscopeDomainNodeFailureEvictions", "GangscopeWorkloadNodeFailureEviction",
            "GangscopeJobProgressStalled", "GangscopeFragmentationBlocked", "GangscopeWorkloadPlacementSpread",
            "GangscopeJobSlowHardware", "GangscopeJobSlowWorkload", "GangscopeRayPlacementGroupPending")
FIRED = re.compile(r"^  \+ *(\d+) s  FIRING  (\w+)  (.*)$")


@pytest.mark.slow
@pytest.mark.skipif(not PROMETHEUS.exists(), reason="needs Debian's prometheus at /usr/bin/prometheus (scripts/setup-env installs it)")
def test_demo_with_prometheus_fires_its_alerts_within_two_minutes() -> None:
    """The real command, default scenario: every promised alert is printed as firing within 120 s
    of the start (the NodeFailures ones after the eviction at +40 s), Ctrl-C then stops the demo
    and its Prometheus, and the summary names what fired."""
    started = time.monotonic()
    proc = subprocess.Popen([*gangscope_command(), "demo", "--prometheus"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "GANGSCOPE_LOG_LEVEL": "warning"})
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    fired: dict[str, tuple[int, str]] = {}
    out: list[str] = []
    try:
        while not set(PROMISED) <= set(fired) and time.monotonic() - started < 150:
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                assert proc.poll() is None, "".join(out) + proc.stderr.read()  # type: ignore[union-attr]
                continue
            out.append(line)
            if m := FIRED.match(line.rstrip("\n")):
                fired.setdefault(m.group(2), (int(m.group(1)), m.group(3)))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(5)
    while not lines.empty():
        out.append(lines.get())
    text = "".join(out)
    assert proc.returncode == 0, text + proc.stderr.read()  # type: ignore[union-attr]
    missing = [name for name in PROMISED if name not in fired]
    assert not missing, f"not fired: {missing}\n{text}"
    assert all(at <= 120 for at, _ in fired.values()), fired
    assert fired["GangscopeDomainNodeFailureEvictions"][0] >= 40  # after the eviction, not before
    assert fired["GangscopeDomainNodeFailureEvictions"][1] == "block=block-2 rack=rack-2-2"
    assert fired["GangscopeNVLinkDown"][1].endswith("gpu=3 link=7")
    # the training layer: llama-train slows with its lagging GPU, sd-lora on healthy GPUs, both at +45 s
    assert fired["GangscopeJobSlowHardware"][1].startswith("namespace=ml-team workload=job-llama-train-"), fired
    assert fired["GangscopeJobSlowWorkload"][1].startswith("namespace=ml-team workload=job-sd-lora-"), fired
    assert fired["GangscopeJobSlowHardware"][0] >= 45 and fired["GangscopeJobSlowWorkload"][0] >= 45
    assert fired["GangscopeRayPlacementGroupPending"][1].startswith("namespace=research workload=job-ray-tune-"), fired
    # Debian's 2.42 ships the classic UI only: /alerts is a 404 there (tests/test_e2e_prometheus.py fetches the page)
    assert re.search(r"^  prometheus\s+http://127\.0\.0\.1:\d+/classic/alerts ", text, re.M), text
    summary = re.search(r"^  alerts that fired: (.*)$", text, re.M)
    assert summary and all(name in summary.group(1) for name in PROMISED), text
    survivors = [p for p in psutil.process_iter() if _in_session(p, proc.pid)]
    assert not survivors, f"processes left behind: {survivors}"
    print("demo: promised alerts fired at " + ", ".join(f"{n} +{at} s" for n, (at, _) in sorted(fired.items(), key=lambda i: i[1])))


def _in_session(p: psutil.Process, sid: int) -> bool:
    try:
        return os.getsid(p.pid) == sid
    except (ProcessLookupError, PermissionError, psutil.Error):
        return False


@pytest.fixture
async def static_demo() -> AsyncIterator[Demo]:
    demo = Demo(scenario_name="static")
    try:
        await demo.start()
        assert await demo.wait_synced(), "the collector or an agent did not sync"
        yield demo
    finally:
        await demo.stop()


async def scrape(session: aiohttp.ClientSession, port: int) -> list[Sample]:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


async def test_running_demo_serves_joined_series(static_demo: Demo) -> None:
    node = "gpu-b1-r1-n1"  # the first node of llama-train (block-1, rack-1-1), pod llama-train-0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        # The agent joins GPUs to pods once its kubelet poll and pod watch both ran.
        deadline = time.monotonic() + 15
        while True:
            samples = await scrape(session, static_demo.agents[node].port)
            pod_info = [s for s in samples if s.name == "gangscope_gpu_pod_info"]
            if (len(pod_info) == 8 and all(s.labels["workload"] for s in pod_info)) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        assert sorted(int(s.labels["gpu"]) for s in pod_info) == list(range(8)), pod_info
        for s in pod_info:
            assert s.value == 1
            assert s.labels["namespace"] == "ml-team"
            assert re.fullmatch(r"job-llama-train-[0-9a-f]{5}", s.labels["workload"]), s.labels
            assert (s.labels["pod"], s.labels["podgroup"], s.labels["node"]) == ("llama-train-0", "llama-train", node)
            assert (s.labels["block"], s.labels["rack"], s.labels["host"]) == ("block-1", "rack-1-1", node)
            assert s.labels["uuid"] == gpu_uuid(node, int(s.labels["gpu"]))

        collector = await scrape(session, static_demo.collector.port)
    unschedulable = {(s.labels["podgroup"], s.labels["api"], s.labels["reason"]) for s in collector
                     if s.name == "gangscope_podgroup_unschedulable"}
    assert unschedulable == {("sam-finetune", "kai", "OverLimit")}
    parents = {s.labels["podgroup"]: s.labels["parent"] for s in collector if s.name == "gangscope_gang_info"}
    assert parents["moe-pipeline-experts"] == parents["moe-pipeline-router"] == "moe-pipeline"
    jobs = {(s.name, s.labels["kind"], s.labels["name"]): s.value for s in collector if s.name.startswith("gangscope_job_")
            and s.name in ("gangscope_job_restarts_total", "gangscope_job_progress_ratio")}
    assert jobs == {("gangscope_job_restarts_total", "JobSet", "llama-gb200"): 4,
                    ("gangscope_job_restarts_total", "JobSet", "gemma-sft"): 0,
                    ("gangscope_job_progress_ratio", "TrainJob", "gemma-sft"): 0.62}
    idle = {(s.labels["namespace"], s.labels["workload"].rsplit("-", 1)[0]): s.value
            for s in collector if s.name == "gangscope_gang_idle_gpus"}
    assert idle[("research", "job-t5-pretrain")] == 16
    assert idle[("ml-team", "job-llama-train")] == 0
    assert idle[("ml-team", "job-mixtral-sft")] == 0


async def test_demo_pages_pass_promtool_check_metrics(static_demo: Demo) -> None:
    """Both processes' pages, as the demo serves them (every family the scenario fills), lint
    clean: no gauge with a suffix promtool reserves (``_count``, ``_sum``, ``_bucket``, ``_total``)."""
    ports = {"collector": static_demo.collector.port, **{f"agent {n}": a.port for n, a in sorted(static_demo.agents.items())[:2]}}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for what, port in ports.items():
            async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                text = await resp.text()
            assert "# TYPE" in text
            lint = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
            assert lint.returncode == 0, f"{what}: " + lint.stdout.decode() + lint.stderr.decode()


@pytest.mark.parametrize("profile", ["a100", "h200", "b200"])
async def test_demo_runs_every_gpu_generation(profile: str) -> None:
    """--sim-profile gives blocks 1-2 another generation (h100 and the gb200 rack run in every demo):
    its agents serve that GPU, its link count and NVLink version, and the pods still join."""
    from exporter.sim.gpus import PROFILES

    p = PROFILES[profile]
    demo = Demo(scenario_name="static", sim_profile=profile)
    try:
        await demo.start()
        assert await demo.wait_synced(), "the collector or an agent did not sync"
        node = "gpu-b1-r1-n1"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            deadline = time.monotonic() + 15
            while True:
                samples = await scrape(session, demo.agents[node].port)
                pods = [s for s in samples if s.name == "gangscope_gpu_pod_info" and s.labels["workload"]]
                if len(pods) == 8 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.3)
            gb200 = await scrape(session, demo.agents["gpu-b3-r1-n1"].port)
        assert {s.labels["name"] for s in samples if s.name == "gangscope_gpu_info"} == {p.product}
        assert len([s for s in samples if s.name == "gangscope_nvlink_link_up" and s.labels["gpu"] == "0"]) == p.links
        assert {s.value for s in samples if s.name == "gangscope_nvlink_version"} == {p.nvlink_version}
        assert len(pods) == 8
        assert {s.labels["name"] for s in gb200 if s.name == "gangscope_gpu_info"} == {"NVIDIA GB200"}
    finally:
        await demo.stop()


async def test_demo_gpus_read_their_pcie_counters_with_each_sample_and_count_no_gaps(static_demo: Demo) -> None:
    """The demo's agents share one process: a GPU whose 32-bit PCIe counters need a read every
    50 ms was read late there every few seconds, each a true gap, and GangscopeGPUCounterReadGaps
    fired for every H100 of the demo. Its GPUs report 64-bit counters, read with the sample: no
    GPU needs the fast reader, and a healthy GPU counts no gap."""
    fast = [(node, i) for node, agent in static_demo.agents.items() for i, st in agent.sampler.gpus.items()
            if st.dev.pcie_mode == "fast"]
    assert not fast, f"GPUs whose PCIe counters need 50 ms reads: {fast[:8]} ({len(fast)})"
    await asyncio.sleep(3.0)  # a few samples of every GPU
    gaps: dict[tuple[str, str], float] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for node, agent in static_demo.agents.items():
            for s in await scrape(session, agent.port):
                if s.name == "gangscope_pcie_read_gaps_total":
                    gaps[(node, s.labels["gpu"])] = s.value
    assert len(gaps) >= 16 * 8, f"too few GPUs export the series: {len(gaps)}"
    assert {k: v for k, v in gaps.items() if v} == {}


KUBECTL = shutil.which("kubectl")
DUMPED = "workloads,localqueues,clusterqueues,topologies,resourceflavors,nodes,podgroups,pods"  # README's offline flow


async def _kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    """kubectl without blocking the event loop the demo's servers run on."""
    assert KUBECTL is not None
    proc = await asyncio.create_subprocess_exec(KUBECTL, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return subprocess.CompletedProcess(args, proc.returncode or 0, out.decode(), err.decode())


@pytest.mark.skipif(KUBECTL is None, reason="needs kubectl on PATH (the README's offline flow dumps with it)")
async def test_readme_offline_flow_runs_on_the_demo(static_demo: Demo, tmp_path: Path) -> None:
    """kubectl with the kubeconfig the demo writes reads its API server (kubectl sends no token
    over plain HTTP: the demo serves HTTPS), another token is refused, and the README's dump then
    ``gangscope snapshot --from-file`` gives every Workload of the dump its series."""
    got = await _kubectl("--kubeconfig", static_demo.kubeconfig, "get", DUMPED, "-A", "-o", "yaml")
    assert got.returncode == 0, got.stderr
    dump = tmp_path / "dump.yaml"
    dump.write_text(got.stdout)
    names = [o["metadata"]["name"] for o in yaml.safe_load(got.stdout)["items"] if o["kind"] == "Workload"]
    assert len(names) == len(static_demo.scenario.workloads), names

    other = yaml.safe_load(Path(static_demo.kubeconfig).read_text())
    other["users"][0]["user"]["token"] = "not-the-demo-token"
    (tmp_path / "other").write_text(yaml.safe_dump(other))
    refused = await _kubectl("--kubeconfig", str(tmp_path / "other"), "get", "workloads", "-A")
    assert refused.returncode != 0 and "Unauthorized" in refused.stderr + refused.stdout, refused

    proc = await asyncio.create_subprocess_exec(*gangscope_command(), "snapshot", "--from-file", str(dump),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    stages = {s.labels["workload"] for f in text_string_to_metric_families(out.decode()) for s in f.samples
              if s.name == "gangscope_workload_stage"}
    assert set(names) <= stages, sorted(set(names) - stages)


def test_demo_training_baselines_end_at_a_fixed_moment_of_the_demo(tmp_path: Path) -> None:
    """A rolling baseline ending 12 s before now holds the slowed rate itself a minute after the
    +45 s slowdowns, and both headline verdicts cleared by +2 min 20 s. The demo's training
    baselines are the 20 s ending at +40 s of its own start (``@``, rebased when the demo copies
    the rules), the NVLink drop alert and the shipped rules keep their rolling ones."""
    from exporter.demo import demo_rules

    start = 1_800_000_000.0
    paths, _ = demo_rules(tmp_path, start)
    rules = [(r.get("record") or r.get("alert"), r["expr"]) for p in paths for g in yaml.safe_load(p.read_text())["groups"]
             for r in g["rules"]]
    baseline = next(e for name, e in rules if name == "namespace_workload:gangscope_job_throughput:baseline")
    assert baseline.endswith(f"[20s] @ {start + 40:.3f})"), baseline
    assert "offset" not in baseline
    interconnect = [e for name, e in rules if name == "namespace_workload:gangscope_interconnect_bytes:ratio"]
    assert len(interconnect) == 2 and all(f"@ {start + 40:.3f}" in e and "offset" not in e for e in interconnect), interconnect
    shipped = Path(__file__).parent.parent / "alerts" / "gangscope-rules.yaml"
    assert "gangscope_job_throughput:rate[1h] offset" in shipped.read_text()


async def test_demo_prints_resolved_when_a_printed_alert_stops_firing(aiohttp_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo printed FIRING lines only: an alert that stopped stood as firing in its output.
    Against a stand-in for Prometheus's alerts API, an alert that fires, then is gone, is printed
    firing then resolved, and the history keeps both."""
    from aiohttp import web

    from exporter.demo import print_alert, print_resolved

    answer: list[dict[str, Any]] = [{"state": "firing", "labels": {"alertname": "GangscopeJobSlowWorkload", "namespace": "ml-team",
                                                                    "workload": "job-sd-lora-1"}},
                                    {"state": "pending", "labels": {"alertname": "GangscopeOther"}}]

    async def alerts(request: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": {"alerts": answer}})

    app = web.Application()
    app.router.add_get("/api/v1/alerts", alerts)
    server = await aiohttp_server(app)
    demo = Demo(on_alert=print_alert, on_resolved=print_resolved)
    demo.prometheus_port, demo.started_at = server.port, time.monotonic()
    task = asyncio.create_task(demo._watch_alerts())
    try:
        for want in (1, 2):
            deadline = time.monotonic() + 10
            while len(demo.history) < want and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            answer = [a for a in answer if a["state"] != "firing"]  # Prometheus resolved it
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        shutil.rmtree(demo.workdir, ignore_errors=True)
    assert [(state, name) for _, state, name, _ in demo.history] == [("firing", "GangscopeJobSlowWorkload"),
                                                                      ("resolved", "GangscopeJobSlowWorkload")]
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"  \+ *\d+ s  FIRING  GangscopeJobSlowWorkload  namespace=ml-team workload=job-sd-lora-1", lines[0]), lines
    assert re.fullmatch(r"  \+ *\d+ s  resolved  GangscopeJobSlowWorkload  namespace=ml-team workload=job-sd-lora-1", lines[1]), lines


async def test_fragmentation_story_survives_the_timeline(tmp_path: Path) -> None:
    """llama-70b-sft is the demo's fragmentation story: three 8-GPU pods required in one rack,
    fit 0 as requested and 1 with the level dropped. The +40 s NodeFailures eviction of
    vit-large empties a rack of three healthy nodes elsewhere, which held it (fit 1, the alert
    gone, the opening text still calling it blocked); its nodeSelector keeps it on block-4.
    Every timeline change applied at once, the fit and the blocked count stay as staged."""
    demo = Demo(scenario_name="static")
    try:
        await demo.start()
        assert await demo.wait_synced(), "the collector or an agent did not sync"
        for _, _, obj in demo.steps:
            demo.apply(obj)
        vit = next(o for _, _, o in demo.steps if o["metadata"]["name"].startswith("job-vit-large-") and "admission" not in o["status"])
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            deadline = time.monotonic() + 20
            while True:  # until the collector has seen the eviction
                samples = await scrape(session, demo.collector.port)
                evicted = [s for s in samples if s.name == "gangscope_workload_evictions_total" and s.labels.get("workload") == vit["metadata"]["name"]]
                if evicted or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.3)
            assert evicted, "the collector did not see vit-large's eviction"
            await asyncio.sleep(1.0)
            samples = await scrape(session, demo.collector.port)
    finally:
        await demo.stop()
    fit = {s.labels["scope"]: s.value for s in samples
           if s.name == "gangscope_workload_fit" and s.labels["workload"].startswith("job-llama-70b-sft-")}
    assert fit == {"domain": 0, "cluster": 1}, fit
    blocked = {s.labels["level"]: s.value for s in samples if s.name == "gangscope_fragmentation_blocked_workloads"
               and s.labels["cluster_queue"] == "gpu-cluster-queue"}
    assert blocked.get("rack") == 1, blocked
