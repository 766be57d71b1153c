"""Benchmark: the node agent on a simulated 8-GPU x 18-link node. One command, prints a table.

    .venv/bin/python bench/agent.py [--scrapes 1000] [--idle 20] [--kube in-cluster|kubeconfig|none] [--entry cli|module]
                                    [--profile h100] [--costs free,idle,spin]

The agent runs as its own process (``gangscope agent --nvml sim``, 1 s sample interval, a real
gRPC kubelet with 8 single-GPU pods, the fixture sysfs tree), so RSS and CPU are the agent's
alone. Kubernetes access is, by ``--kube``: ``in-cluster`` (default, as deployed) a service
account (token and CA files, ``KUBERNETES_SERVICE_HOST``/``PORT``) for the simulated API server
over TLS, serving the Node, its 8 pods and a Kueue Topology; ``kubeconfig`` the same server over
HTTP through a kubeconfig (which loads the ``kubernetes`` package); ``none`` no access at all.
``--entry cli`` starts it as deployed (``python -m exporter agent``: the ``gangscope`` command),
``module`` as ``python -m exporter.node.main`` (the agent's imports only).

NVML calls are not free, so the agent runs once per cost model (``--costs``): ``free`` (the
simulator answers in microseconds: gangscope's own cost), ``idle`` (``--nvml sim:latency-idle``:
every call takes the time a real one takes, spent waiting), ``spin`` (``sim:latency``: the
same time spent on the CPU, as a driver polling for the GPU's reply would; the upper bound) and
``spin-slow-pcie`` (``spin`` with ``--pcie-interval 0``: what the fast PCIe reads cost), and
``c-abi``: ``--nvml real``, the real nvidia-ml-py over the C stand-in ``libnvidia-ml.so.1``
(exporter/sim/libnvml, built with gcc here) whose every call spins ``--call-us`` (default 30)
microseconds on the CPU: nvidia-ml-py's wrappers, ctypes and the structs they build, and for the
field values the C function the wrapper calls with the agent's own arrays (``FieldRequest`` in
exporter/node/nvml.py), all charged as on a real node, which the simulator at the pynvml boundary
cannot do. The per-call times and their source are ``exporter.sim.nvml.CALL_COSTS``. The h100 profile reads
its 32-bit PCIe counters every 50 ms, so the CPU includes the fast PCIe reads. Measured:

- scrape latency p50/p99 over ``--scrapes`` sequential scrapes (Prometheus text, and
  OpenMetrics with gzip as Prometheus asks for it), measured by the client;
- CPU per second of wall time while idle (sampler, pod-resources poller, fabric reader), from
  the process's CPU times over ``--idle`` seconds without scrapes;
- RSS after warm-up and after all scrapes.

Targets: scrape p99 < 10 ms, sampler CPU < 2% of a core at 8 GPUs x 18 links including
the fast PCIe reads, RSS < 64 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.kube.resources import AGENT_NODE, AGENT_PODS, TOPOLOGIES  # noqa: E402
from exporter.sim.apiserver import SimApiServer, make_object  # noqa: E402
from exporter.sim.kubelet import SimContainer, SimKubelet, SimPod  # noqa: E402
from exporter.sim import libnvml  # noqa: E402
from exporter.sim.nvml import SimNvml  # noqa: E402

NODE = "bench-node"
BLOCK, RACK, HOST = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
# In-cluster: point the service-account paths at the bench's files, then run the agent as usual.
IN_CLUSTER = ("import runpy, sys; import exporter.kube.credentials as c; c.SA_TOKEN, c.SA_CA = sys.argv[1:3]; "
              "sys.argv = [sys.argv[3], *sys.argv[4:]]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def scrape_many(port: int, n: int, openmetrics_gzip: bool) -> tuple[list[float], int, int]:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"} if openmetrics_gzip \
        else {"Accept": "text/plain", "Accept-Encoding": "identity"}
    times, size, lines = [], 0, 0
    async with aiohttp.ClientSession(auto_decompress=False) as s:
        for _ in range(n):
            t0 = time.perf_counter()
            async with s.get(f"http://127.0.0.1:{port}/metrics", headers=headers) as r:
                body = await r.read()
            times.append((time.perf_counter() - t0) * 1000)
            size = len(body)
            if not openmetrics_gzip:
                lines = body.count(b"\n")
    return times, size, lines


async def start_apiserver(tmp: str, tls: bool) -> SimApiServer:
    """The simulated API server with this node, its pods and a Kueue Topology (block, rack, host)."""
    ctx = None
    if tls:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                        "-keyout", "server.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=sim-apiserver",
                        "-addext", "subjectAltName=IP:127.0.0.1"], cwd=tmp, check=True, capture_output=True)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(os.path.join(tmp, "ca.crt"), os.path.join(tmp, "server.key"))
    api = await SimApiServer(token="bench-token").start(ssl_context=ctx)
    for resource in (AGENT_NODE, AGENT_PODS, TOPOLOGIES):
        api.serve(resource)
    api.create(make_object(AGENT_NODE, NODE, None, labels={BLOCK: "b1", RACK: "r1", HOST: NODE}))
    api.create(make_object(TOPOLOGIES, "default", None, spec={"levels": [{"nodeLabel": k} for k in (BLOCK, RACK, HOST)]}))
    for i in range(8):
        obj = make_object(AGENT_PODS, f"train-{i}", "team-a", labels={"kueue.x-k8s.io/podset": "workers"},
                          spec={"nodeName": NODE})
        obj["metadata"]["annotations"] = {"kueue.x-k8s.io/workload": "job-train"}
        api.create(obj)
    return api


# cost model -> (--nvml, extra agent flags)
COST_MODELS = {
    "free": ("sim", ()),
    "idle": ("sim:latency-idle", ()),
    "spin": ("sim:latency", ()),
    "spin-slow-pcie": ("sim:latency", ("--pcie-interval", "0")),
    "c-abi": ("real", ()),
}


async def run_agent(args: argparse.Namespace, nvml: str, extra: tuple[str, ...], scrapes: int) -> dict:
    """One agent process with ``--nvml nvml``: its idle CPU, scrape latencies and RSS."""
    sim = SimNvml(profile=args.profile)
    tmp = tempfile.mkdtemp(prefix="gsb-", dir="/tmp")
    sock = os.path.join(tmp, "kubelet.sock")
    uuids = [g.uuid for g in sim.gpus] if nvml != "real" else [libnvml.gpu_uuid(args.profile, i) for i in range(len(sim.gpus))]
    kubelet = SimKubelet(sock, [SimPod("team-a", f"train-{i}", [SimContainer("trainer", [("nvidia.com/gpu", [u])])])
                                for i, u in enumerate(uuids)])
    await kubelet.start()
    api = None if args.kube == "none" else await start_apiserver(tmp, tls=args.kube == "in-cluster")
    port = free_port()
    entry = ["exporter", "agent"] if args.entry == "cli" else ["exporter.node.main"]
    profile_args = ["--sim-profile", args.profile] if nvml != "real" else []
    agent_args = ["--nvml", nvml, *profile_args, "--listen", f"127.0.0.1:{port}", "--sample-interval", "1",
                  "--pod-resources-socket", sock, "--sysfs", str(ROOT / "tests/fixtures/sysfs"), "--node-name", NODE,
                  "--log-level", "error", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    if nvml == "real":  # the C stand-in under the real nvidia-ml-py, each call costing --call-us on the CPU
        libdir = libnvml.build(Path(tempfile.gettempdir()) / "gangscope-bench-libnvml")
        state = libnvml.StubState(Path(tmp) / "nvml-state")
        env = libnvml.environment(libdir, args.profile, state.path, call_us=args.call_us, base=env)
    if args.kube == "in-cluster":
        assert api is not None
        with open(os.path.join(tmp, "token"), "w") as f:
            f.write("bench-token")
        env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(api.port))
        cmd = [sys.executable, "-c", IN_CLUSTER, os.path.join(tmp, "token"), os.path.join(tmp, "ca.crt"), *entry, *agent_args]
    else:
        kubeconfig = api.write_kubeconfig(os.path.join(tmp, "kubeconfig")) if api else os.path.join(tmp, "no-kubeconfig")
        cmd = [sys.executable, "-m", *entry, *agent_args, "--kubeconfig", kubeconfig]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    ps = psutil.Process(proc.pid)
    # With Kubernetes access, wait for the join with the pods' workloads and the Topology's levels.
    ready = b'workload="job-train"' if api else b"gangscope_gpu_pod_info{"
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(200):
                try:
                    async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                        body = await r.read()
                        if ready in body and (api is None or b'rack="r1"' in body):
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise SystemExit("agent did not come up")
        await asyncio.sleep(3)  # warm-up: a few samples, first pod-resources answer
        rss_warm = ps.memory_info().rss
        c0, w0 = ps.cpu_times(), time.monotonic()
        await asyncio.sleep(args.idle)
        c1, w1 = ps.cpu_times(), time.monotonic()
        out: dict[str, Any] = {"cpu": ((c1.user + c1.system) - (c0.user + c0.system)) / (w1 - w0), "rss_warm": rss_warm}
        if scrapes:
            out["text"] = await scrape_many(port, scrapes, False)
            out["gzip"] = await scrape_many(port, scrapes, True)
        out["rss_end"] = ps.memory_info().rss
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        await kubelet.stop()
        if api is not None:
            await api.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def main(args: argparse.Namespace) -> None:
    costs = [c.strip() for c in args.costs.split(",") if c.strip()]
    runs = {}
    for i, cost in enumerate(costs):  # scrape latency and RSS from the last (most expensive) model only
        runs[cost] = await run_agent(args, *COST_MODELS[cost], args.scrapes if i == len(costs) - 1 else 0)
    last = runs[costs[-1]]
    text_times, text_size, lines = last["text"]
    gz_times, gz_size, _ = last["gzip"]
    sim = SimNvml(profile=args.profile)
    rows = [
        ("node", f"{len(sim.gpus)} {args.profile} GPUs x {sim.gpus[0].links} NVLink links (simulated NVML), "
                 f"{len(sim.gpus)} pods, 3 IB ports + 1 NIC; c-abi: the same answers from the C stand-in", ""),
        ("Kubernetes access, entry", f"{args.kube}, {'gangscope agent' if args.entry == 'cli' else 'exporter.node.main'}", ""),
        ("series per scrape", f"{lines} lines", ""),
        ("scrape p50 / p99, text", f"{pct(text_times, 50):.2f} / {pct(text_times, 99):.2f} ms  ({text_size / 1024:.0f} KiB)",
         "p99 < 10 ms"),
        ("scrape p50 / p99, OpenMetrics+gzip", f"{pct(gz_times, 50):.2f} / {pct(gz_times, 99):.2f} ms  ({gz_size / 1024:.0f} KiB)",
         "p99 < 10 ms"),
    ]
    labels = {"free": "NVML calls free", "idle": "NVML call times spent waiting", "spin": "NVML call times spent on the CPU",
              "spin-slow-pcie": "the same, --pcie-interval 0",
              "c-abi": f"real pynvml + C libnvidia-ml, {args.call_us} us/call on the CPU"}
    for cost in costs:
        rows.append((f"agent CPU, {labels[cost]}", f"{runs[cost]['cpu'] * 100:.2f}% of one core", "< 2%"))
    rows.append(("RSS after warm-up / after scrapes",
                 f"{last['rss_warm'] / 2**20:.1f} / {last['rss_end'] / 2**20:.1f} MiB", "< 64 MiB"))
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    print(f"{'measure':<{width}} | {'value':<{vwidth}} | target")
    print(f"{'-' * width}-|-{'-' * vwidth}-|-------")
    for name, val, target in rows:
        print(f"{name:<{width}} | {val:<{vwidth}} | {target}")
    print(f"({args.scrapes} scrapes each, CPU over {args.idle:.0f} s without scrapes per cost model, 1 s samples, "
          f"{os.cpu_count()} CPUs; call costs from exporter.sim.nvml.CALL_COSTS)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--kube", choices=("in-cluster", "kubeconfig", "none"), default="in-cluster")
    parser.add_argument("--entry", choices=("cli", "module"), default="cli")
    parser.add_argument("--profile", default="h100", help="GPU generation of the simulated NVML (default h100)")
    parser.add_argument("--costs", default="free,idle,spin-slow-pcie,spin,c-abi",
                        help="NVML cost models to run, comma-separated: free, idle, spin, spin-slow-pcie "
                             "(spin with --pcie-interval 0), c-abi (the real pynvml over the C stand-in) "
                             "(default all five; scrapes and RSS from the last)")
    parser.add_argument("--call-us", type=int, default=30, help="microseconds each call of the C stand-in spends on the CPU")
    asyncio.run(main(parser.parse_args()))
