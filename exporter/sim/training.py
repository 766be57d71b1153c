"""Simulated training processes and a simulated Ray head for the demo: each serves what the real
one exports, over real HTTP, for the demo's Prometheus to scrape.

A training job's throughput (``tokens_per_second``, one gauge per pod, the way a PyTorch job's
own exporter behind a PodMonitor reads after the operator's ``namespace``/``pod`` target labels)
follows a timeline: a factor of the job's steady rate that the demo changes at chosen moments, so
the job with the lagging GPU slows down when its NVLink does and a job with healthy hardware
slows down on its own (a data-loading stall).

The Ray head serves the GCS's ``ray_placement_groups{State}`` and ``ray_tasks{State, Name,
IsRetry}`` (ray-project/ray 09c36104 src/ray/stats/metric_defs.cc ``placement_groups``; 07cdf040
doc/source/ray-observability/reference/system-metrics.rst) with ``SessionName`` and the
``ray_io_cluster`` label KubeRay's PodMonitor adds (kuberay feeaf72f config/prometheus/podMonitor.yaml:47-51).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class MetricsServer:
    """An aiohttp server on loopback whose /metrics is ``render()``."""

    port: int = 0
    _runner: web.AppRunner | None = None

    def render(self) -> str:
        raise NotImplementedError

    async def start(self, host: str = "127.0.0.1") -> None:
        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=self.render().encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@dataclass
class TrainingProcess(MetricsServer):
    """The pods of one training job, each reporting its share of the job's tokens per second."""

    namespace: str = ""
    pods: tuple[str, ...] = ()
    tokens_per_second: float = 0.0  # per pod, at full speed
    factor: float = 1.0  # the share of full speed the job runs at now

    def render(self) -> str:
        lines = ["# HELP tokens_per_second Tokens this rank trains per second.", "# TYPE tokens_per_second gauge"]
        lines += [f'tokens_per_second{{namespace="{self.namespace}",pod="{pod}"}} {self.tokens_per_second * self.factor:g}'
                  for pod in self.pods]
        return "\n".join(lines) + "\n"


@dataclass
class RayHead(MetricsServer):
    """A Ray cluster's head pod: placement groups and tasks by state."""

    namespace: str = ""
    cluster: str = ""
    pod: str = ""
    session: str = "session_2026-12-01_10-00-00_000000_1"
    placement_groups: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, int] = field(default_factory=dict)

    def render(self) -> str:
        common = f'namespace="{self.namespace}",pod="{self.pod}",ray_io_cluster="{self.cluster}",SessionName="{self.session}"'
        lines = ["# HELP ray_placement_groups Number of placement groups broken down by state.", "# TYPE ray_placement_groups gauge"]
        lines += [f'ray_placement_groups{{{common},State="{s}"}} {n}' for s, n in sorted(self.placement_groups.items())]
        lines += ["# HELP ray_tasks Current number of tasks by state.", "# TYPE ray_tasks gauge"]
        lines += [f'ray_tasks{{{common},Name="train_fn",State="{s}",IsRetry="0"}} {n}' for s, n in sorted(self.tasks.items())]
        return "\n".join(lines) + "\n"
