"""Start the HTTP endpoint of a process from its serving flags: TLS with reload, request auth.

Both processes call :func:`start`, so ``--listen``, ``--tls-cert``/``--tls-key`` and
``--metrics-auth`` behave identically in the collector and the agent, and both export their
build and process figures (:mod:`exporter.selfmetrics`) and serve the same landing page.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .auth import AUTH_REQUESTS, Guard, PostJson
from .errors import CommandError
from .exposition import Exposition
from .health import SourceHealth
from .selfmetrics import SelfMetrics
from .server import ReadyCheck, ServerConfig, bound_port, build_app, parse_listen, start_server
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


def check(args: argparse.Namespace) -> None:
    """The serving flags that cannot work, as the command's one-line error (CommandError), before
    the process logs its start or opens a connection: nothing to close, nothing to read past."""
    try:
        parse_listen(args.listen)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if bool(args.tls_cert) != bool(args.tls_key):
        raise CommandError("--tls-cert and --tls-key go together")


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
    make the landing page (exporter.server.ServerConfig). What the flags or the machine refuse
    (see :func:`check`, a port in use, unreadable certificate files) is a CommandError; the
    caller closes what it opened before."""
    check(args)
    tls = None
    if args.tls_cert:
        try:
            tls = ReloadingTLS(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise CommandError(f"cannot load --tls-cert {args.tls_cert} and --tls-key {args.tls_key}: {exc}") from None
    auth = None
    if args.metrics_auth:
        if post_json is None:
            raise CommandError("--metrics-auth needs access to the Kubernetes API (TokenReview, SubjectAccessReview)")
        exposition.register(AUTH_REQUESTS)
        auth = Guard(post_json)
        auth.on_change = lambda: exposition.set(("auth",), {AUTH_REQUESTS: auth.lines()})
    own = SelfMetrics(exposition)
    config = ServerConfig(exposition, ready, list(extra_routes or []), auth, own.render, title, list(links or []), sources,
                          list(routes or []), featured)
    try:
        runner = await start_server(build_app(config), args.listen, tls.context if tls else None)
    except OSError as exc:  # the port in use, an address not of this machine, a port below 1024 without the right
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise CommandError(f"cannot listen on {args.listen}: {why}", status=1) from None
    serving = Serving(runner, bound_port(runner), tls, auth)
    if tls:
        serving.tasks.append(asyncio.create_task(tls.watch()))
    return serving
