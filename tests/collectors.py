"""A collector for tests: the real ``gangscope collector`` wiring, tuned to fail and recover fast."""

from __future__ import annotations

import argparse
from typing import Any

from exporter.cluster.main import Collector, add_arguments
from exporter.kube.backoff import BackoffPolicy

FAST_CLIENT = {"request_timeout": 2.0, "watch_read_slack": 1.0}


def make_collector(kubeconfig: str, *flags: str, discovery_interval: float = 0.2, **client_options: Any) -> Collector:
    """A collector (not started) on ``kubeconfig`` listening on a free loopback port, with
    millisecond backoff and short client timeouts (``client_options`` override them)."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--kubeconfig", kubeconfig, "--listen", "127.0.0.1:0",
                              "--discovery-interval", str(discovery_interval), *flags])
    return Collector(args, backoff=BackoffPolicy(base=0.01, cap=0.05),
                     client_options={**FAST_CLIENT, **client_options})


async def started_collector(kubeconfig: str, *flags: str, discovery_interval: float = 0.2, **client_options: Any) -> Collector:
    """:func:`make_collector`, started, with every served source listed once (a generous limit:
    twenty-odd sources listing at once against a real API server on a busy 2-core machine)."""
    collector = make_collector(kubeconfig, *flags, discovery_interval=discovery_interval, **client_options)
    await collector.start()
    await collector.sources.wait_ready(20)
    return collector
