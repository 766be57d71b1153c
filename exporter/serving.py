"""Start the HTTP endpoint of a process from its serving flags: TLS with reload, request auth.

Both processes call :func:`start`, so ``--listen``, ``--tls-cert``/``--tls-key`` and
``--metrics-auth`` behave identically in the collector and the agent, and both export their
build and process figures (:mod:`exporter.selfmetrics`) and serve the same landing page.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .auth import AUTH_REQUESTS, Guard, PostJson
from .exposition import Exposition
from .health import SourceHealth
from .selfmetrics import SelfMetrics
from .server import ReadyCheck, ServerConfig, bound_port, build_app, start_server
from .tls import ReloadingTLS


@dataclass
class Serving:
    runner: web.AppRunner
    port: int
    tls: ReloadingTLS | None = None
    auth: Guard | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.runner.cleanup()


async def start(
    args: argparse.Namespace,
    exposition: Exposition,
    ready: ReadyCheck,
    extra_routes: list[web.RouteDef] | None = None,
    post_json: PostJson | None = None,
    *,
    title: str = "gangscope",
    links: list[tuple[str, str]] | None = None,
    sources: Callable[[], Iterable[SourceHealth]] = lambda: (),
    routes: list[tuple[str, str]] | None = None,
    featured: Any = None,
) -> Serving:
    """Serve ``exposition``; ``post_json`` (the API client's) is required with ``--metrics-auth``.
    ``title``, ``links`` (the extra routes, as path and description), ``routes`` (routes shown by
    the shape of their query, not linked), ``featured`` (a live section of links) and ``sources``
    make the landing page (exporter.server.ServerConfig)."""
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise SystemExit("--tls-cert and --tls-key go together")
        tls = ReloadingTLS(args.tls_cert, args.tls_key)
    auth = None
    if args.metrics_auth:
        if post_json is None:
            raise SystemExit("--metrics-auth needs access to the Kubernetes API (TokenReview, SubjectAccessReview)")
        exposition.register(AUTH_REQUESTS)
        auth = Guard(post_json)
        auth.on_change = lambda: exposition.set(("auth",), {AUTH_REQUESTS: auth.lines()})
    own = SelfMetrics(exposition)
    config = ServerConfig(exposition, ready, list(extra_routes or []), auth, own.render, title, list(links or []), sources,
                          list(routes or []), featured)
    runner = await start_server(build_app(config), args.listen, tls.context if tls else None)
    serving = Serving(runner, bound_port(runner), tls, auth)
    if tls:
        serving.tasks.append(asyncio.create_task(tls.watch()))
    return serving
