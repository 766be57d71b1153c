"""The aiohttp app both processes serve: /metrics with format negotiation, /healthz, /readyz.

The scrape handler never computes anything: it asks the process's :class:`Exposition` for the
already rendered pieces and streams them. Streaming measured faster than joining one body
(bench/collector.py, 20,000 Workloads, client in the same process: ~170 against ~350 ms) and
never holds a second copy of the page.

Gzip, which Prometheus always asks for, is the one costly step (a 100 MB page is ~0.1 s of CPU).
The compressed page is kept per format until the exposition changes, compressed once in a
worker thread (zlib releases the GIL) however many scrapes arrive meanwhile: an HA pair of
Prometheus servers, or a burst of scrapes, costs one compression, and the event loop keeps
serving. It is small (the page compresses 10-30x), so keeping it costs little memory.
Everything else (watch events, NVML samples) happens off the scrape path.
"""

from __future__ import annotations

import asyncio
import ssl
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from .exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, Exposition

ReadyCheck = Callable[[], tuple[bool, str]]
Middleware = Callable[[web.Request, Callable[[web.Request], Awaitable[web.StreamResponse]]], Awaitable[web.StreamResponse]]

# gzip level 1: scrape payloads are repetitive text; level 1 gets most of the size win at a
# fraction of the CPU of the default level 9 (a 20,000-workload page compresses ~10x either way).
GZIP_LEVEL = 1


# Parts (owners' chunks) joined per socket write while streaming a scrape: ~1 MB writes, so the
# response never exists as one 100 MB copy and the event loop runs between writes.
PARTS_PER_WRITE = 2000


async def stream_parts(request: web.Request, parts: list[bytes], headers: dict[str, str]) -> web.StreamResponse:
    """Write ``parts`` as the response body in batches of about 1 MB."""
    resp = web.StreamResponse(headers=headers)
    resp.content_length = sum(map(len, parts))
    await resp.prepare(request)
    if request.method == "HEAD":  # headers only: unlike web.Response, a stream would write the body
        await resp.write_eof()
        return resp
    try:
        for i in range(0, len(parts), PARTS_PER_WRITE):
            await resp.write(b"".join(parts[i:i + PARTS_PER_WRITE]))
        await resp.write_eof()
    except ConnectionResetError:  # the scraper went away mid-response: nothing to answer
        pass
    return resp


def gzip_parts(parts: list[bytes]) -> bytes:
    """One gzip member of ``parts`` (compressed in ~1 MB batches: no joined copy of the page)."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # 16+: gzip framing
    out = [compressor.compress(b"".join(parts[i:i + PARTS_PER_WRITE])) for i in range(0, len(parts), PARTS_PER_WRITE)]
    out.append(compressor.flush())
    return b"".join(out)


class GzipPages:
    """The gzipped page per format, valid for one :attr:`Exposition.generation`."""

    def __init__(self, exposition: Exposition) -> None:
        self.exposition = exposition
        self._pages: dict[bool, tuple[int, asyncio.Task[bytes]]] = {}
        self.compressions = 0

    async def get(self, openmetrics: bool) -> bytes:
        generation = self.exposition.generation
        cached = self._pages.get(openmetrics)
        if cached is None or cached[0] != generation:
            parts = self.exposition.render_parts(openmetrics)  # a snapshot, taken on the loop
            task = asyncio.ensure_future(asyncio.to_thread(gzip_parts, parts))
            self.compressions += 1
            cached = (generation, task)
            self._pages[openmetrics] = cached
        # shield: a scraper that goes away must not cancel the compression the others wait for
        return await asyncio.shield(cached[1])


def wants_openmetrics(accept: str) -> bool:
    """True when the scraper lists OpenMetrics as acceptable (Prometheus does, with a q-value)."""
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        if media == "application/openmetrics-text":
            q = next((p[2:] for p in params if p.startswith("q=")), "1")
            try:
                if float(q) > 0:
                    return True
            except ValueError:
                return True
    return False


@dataclass
class ServerConfig:
    exposition: Exposition
    ready: ReadyCheck
    extra_routes: list[web.RouteDef] = field(default_factory=list)
    metrics_middleware: Middleware | None = None


GZIP_PAGES = web.AppKey("gzip_pages", GzipPages)


def build_app(config: ServerConfig) -> web.Application:
    """The shared app; callers add their own routes (e.g. the collector's /debug/explain)."""

    gzip_pages = GzipPages(config.exposition)

    async def metrics(request: web.Request) -> web.StreamResponse:
        openmetrics = wants_openmetrics(request.headers.get("Accept", ""))
        headers = {"Content-Type": OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            body = await gzip_pages.get(openmetrics)
            return web.Response(body=body, headers={**headers, "Content-Encoding": "gzip"})
        return await stream_parts(request, config.exposition.render_parts(openmetrics), headers)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        ok, detail = config.ready()
        return web.Response(status=200 if ok else 503, text=detail + "\n")

    metrics_handler = metrics
    if config.metrics_middleware is not None:
        guard = config.metrics_middleware

        async def guarded(request: web.Request) -> web.StreamResponse:
            return await guard(request, metrics)

        metrics_handler = guarded  # type: ignore[assignment]

    app = web.Application()
    app[GZIP_PAGES] = gzip_pages
    app.add_routes(
        [
            web.get("/metrics", metrics_handler),
            web.get("/healthz", healthz),
            web.get("/readyz", readyz),
            *config.extra_routes,
        ]
    )
    return app


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6, ``:9400`` for all interfaces)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen wants HOST:PORT, got {value!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


async def start_server(app: web.Application, listen: str, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    """Start serving; returns the runner (``await runner.cleanup()`` stops it). Port 0 picks a free one."""
    host, port = parse_listen(listen)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port actually bound (useful with ``--listen 127.0.0.1:0``)."""
    for site in runner.sites:
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            return int(server.sockets[0].getsockname()[1])
    raise RuntimeError("server is not started")
