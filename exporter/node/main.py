"""``gangscope agent``: per-GPU NVLink/PCIe/fabric metrics mapped to pods, workloads and topology.

Flags and process lifecycle only; the wiring is :class:`exporter.node.agent.Agent`. SIGTERM and
SIGINT stop every source and the server, then the process exits 0. When ``nvmlInit`` answers
that the driver changed under the process (``LIB_RM_VERSION_MISMATCH``, ``DRIVER_NOT_LOADED``)
the agent stops the same way and exits 3, for the kubelet to restart it with the current driver.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys

import structlog

from ..config import add_kube, add_logging, add_serving, add_topology, family_filter, topology_from_args
from ..logs import start_logging
from ..topology import TopologyError, TopologyLevels
from .podresources import DEFAULT_RESOURCES, DEFAULT_SOCKET

log = structlog.get_logger(__name__)

DEFAULT_LISTEN = "0.0.0.0:9401"
SIM_PROFILES = ("a100", "h100", "h200", "b200", "gb200")  # exporter.sim.gpus.PROFILES, without importing the simulator


def _pcie_interval(value: str) -> float | None:
    if value == "auto":
        return None
    seconds = float(value)
    if seconds < 0:
        raise argparse.ArgumentTypeError("must be auto or a number of seconds >= 0")
    return seconds


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_serving(p, DEFAULT_LISTEN)
    add_kube(p)
    add_topology(p)
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME") or socket.gethostname(),
                   help="this node's name, for its Node object and the pods on it (default $NODE_NAME, else the hostname)")
    p.add_argument("--nvml", default="real", metavar="real|sim[:SCENARIO,...]",
                   help="NVML library: real (libnvidia-ml.so.1) or the simulated one with scenarios "
                        "(degraded, lost-gpu, unsupported, wrap, hang, mig, straggler, fabric-degraded, latency, "
                        "latency-idle, nodriver) (default real)")
    p.add_argument("--sim-profile", default=None, choices=sorted(SIM_PROFILES), metavar="|".join(SIM_PROFILES),
                   help="GPU generation the simulated NVML answers as, with its links, fields, value types and "
                        "traffic (default h100; only with --nvml sim)")
    p.add_argument("--sample-interval", type=float, default=1.0,
                   help="seconds between NVML and sysfs samples (default 1: rate() error from sample steps under 2%% "
                        "over a 1m window, at about 1%% of a core for 8 GPUs besides the fast PCIe reads)")
    p.add_argument("--nvml-timeout", type=float, default=2.0,
                   help="seconds an NVML call on a GPU may take, from its start, before the GPU is reported down; "
                        "each GPU has its own thread and deadline (default 2)")
    p.add_argument("--pcie-interval", type=_pcie_interval, default=None, metavar="auto|SECONDS",
                   help="seconds between reads of 32-bit PCIe byte counters: auto reads each GPU at 3/4 of the time "
                        "its link's maximum rate takes to wrap them (50 ms at Gen5 x16), so they are exact at any "
                        "rate; 0 reads them only with each sample (cheaper, a lower bound above 4 GB per sample); "
                        "64-bit counters are always read with the sample (default auto)")
    p.add_argument("--pod-resources-socket", default=DEFAULT_SOCKET,
                   help=f"kubelet pod-resources unix socket (default {DEFAULT_SOCKET})")
    p.add_argument("--pod-resources-interval", type=float, default=10.0,
                   help="seconds between kubelet pod-resources List calls (default 10)")
    p.add_argument("--gpu-resource", action="append", default=None, metavar="NAME",
                   help="extended resource whose devices are GPUs, NAME* for a prefix (repeatable; "
                        f"default {', '.join(DEFAULT_RESOURCES)}); DRA claims of driver gpu.nvidia.com always count")
    p.add_argument("--sysfs", default="/sys", help="sysfs root for InfiniBand and NIC counters (default /sys)")
    add_logging(p)


def run(args: argparse.Namespace) -> int:
    from .. import serving

    serving.check(args)  # a --listen that cannot work: the one error line, before the start is logged
    start_logging("agent", args, args.log_level)
    try:
        levels, _ = topology_from_args(args)
    except TopologyError as exc:
        log.error("bad_topology_flags", error=str(exc))
        return 2
    if args.nvml != "real" and not (args.nvml == "sim" or args.nvml.startswith("sim:")):
        log.error("bad_nvml_flag", value=args.nvml)
        return 2
    if args.sim_profile and args.nvml == "real":
        log.error("bad_sim_profile_flag", reason="--sim-profile needs --nvml sim")
        return 2
    try:
        family_filter(args)
    except ValueError as exc:
        log.error("bad_flags", error=str(exc))
        return 2
    try:
        stuck, status = asyncio.run(serve(args, levels))
    except KeyboardInterrupt:
        return 130
    except ValueError as exc:  # an unknown simulated scenario
        log.error("agent_failed", error=str(exc))
        return 2
    if stuck:
        # A hung driver call holds a worker thread that the interpreter would join at exit,
        # forever; everything else is already closed, so leave without waiting for it.
        log.warning("agent_exit_with_nvml_call_running")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(status)
    return status


async def serve(args: argparse.Namespace, levels: TopologyLevels, stop: asyncio.Event | None = None) -> tuple[bool, int]:
    """Run the agent until ``stop`` is set (by SIGTERM/SIGINT when not given) or NVML refuses the
    driver for good; (whether an NVML call is still stuck in the driver after shutdown, the exit status)."""
    from .agent import Agent
    from .lifecycle import EXIT_DRIVER_CHANGED

    agent = Agent(args, levels)
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    try:
        await agent.start()
    except BaseException:  # a port in use (CommandError): close what started, the API client's session first of all
        await agent.stop()
        raise
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(agent.lifecycle.wait_fatal())]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
        log.info("agent_stopping")
        await agent.stop()
    return agent.lifecycle.stuck(), EXIT_DRIVER_CHANGED if agent.lifecycle.fatal is not None else 0


if __name__ == "__main__":  # ``python -m exporter.node.main``: the agent without the other subcommands' imports
    from ..errors import CommandError

    _parser = argparse.ArgumentParser(prog="gangscope agent")
    add_arguments(_parser)
    try:
        sys.exit(run(_parser.parse_args()))
    except CommandError as _exc:  # what exporter.cli.main says for ``gangscope agent``
        print(f"gangscope agent: {_exc}", file=sys.stderr)
        sys.exit(_exc.status)
