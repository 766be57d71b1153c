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

The one exception is the process's own figures (CPU seconds, RSS, open fds: ``live``), which
change between any two scrapes and cost microseconds: they are rendered per scrape and appended
to the page. The cached gzip page keeps its compressor open, and each scrape continues a copy of
it with those few lines, so the body stays one gzip member without compressing the page again.

``/`` is a landing page naming the process, its version, its endpoints and its sources' health,
as node_exporter, kube-state-metrics and dcgm-exporter have; with ``--metrics-auth`` every other
route except the probes is guarded (:mod:`exporter.auth`).
"""

from __future__ import annotations

import asyncio
import html
import ssl
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import structlog
from aiohttp import web

from . import __version__
from .auth import GUARD, OPEN_PATHS, Guard
from .exposition import EOF, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, Exposition
from .health import InternalErrors, SourceHealth

log = structlog.get_logger(__name__)

ReadyCheck = Callable[[], tuple[bool, str]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

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


def gzip_parts(parts: list[bytes]) -> tuple[bytes, zlib._Compress]:
    """``parts`` gzipped (in ~1 MB batches: no joined copy of the page), and the compressor,
    still open, so more lines can follow in the same gzip member (:meth:`GzipPages.get`)."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # 16+: gzip framing
    out = [compressor.compress(b"".join(parts[i:i + PARTS_PER_WRITE])) for i in range(0, len(parts), PARTS_PER_WRITE)]
    return b"".join(out), compressor


class GzipPages:
    """The gzipped page per format, valid for one :attr:`Exposition.generation`."""

    def __init__(self, exposition: Exposition) -> None:
        self.exposition = exposition
        self._pages: dict[bool, tuple[int, asyncio.Task[tuple[bytes, zlib._Compress]]]] = {}
        self.compressions = 0

    async def get(self, openmetrics: bool, tail: bytes = b"") -> bytes:
        """The page, then ``tail`` (lines rendered for this scrape), as one gzip member."""
        generation = self.exposition.generation
        cached = self._pages.get(openmetrics)
        if cached is None or cached[0] != generation:
            parts = self.exposition.render_parts(openmetrics, eof=False)  # a snapshot, taken on the loop
            task = asyncio.ensure_future(asyncio.to_thread(gzip_parts, parts))
            self.compressions += 1
            cached = (generation, task)
            self._pages[openmetrics] = cached
        # shield: a scraper that goes away must not cancel the compression the others wait for
        head, compressor = await asyncio.shield(cached[1])
        rest = compressor.copy()  # the cached compressor stays open for the next scrape
        return head + rest.compress(tail + (EOF if openmetrics else b"")) + rest.flush()


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
    guard: Guard | None = None
    # Lines rendered at each scrape and served after the exposition (the process's own figures).
    live: Callable[[bool], bytes] | None = None
    # The landing page: what this process is, its other endpoints (path, what it serves), its sources.
    title: str = "gangscope"
    links: list[tuple[str, str]] = field(default_factory=list)
    sources: Callable[[], Iterable[SourceHealth]] = lambda: ()


GZIP_PAGES = web.AppKey("gzip_pages", GzipPages)


def build_app(config: ServerConfig) -> web.Application:
    """The shared app; callers add their own routes (e.g. the collector's /debug/explain)."""

    gzip_pages = GzipPages(config.exposition)
    internal_errors = InternalErrors.of(config.exposition)
    internal_errors.declare("http")

    async def metrics(request: web.Request) -> web.StreamResponse:
        openmetrics = wants_openmetrics(request.headers.get("Accept", ""))
        headers = {"Content-Type": OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE}
        tail = config.live(openmetrics) if config.live else b""
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            body = await gzip_pages.get(openmetrics, tail)
            return web.Response(body=body, headers={**headers, "Content-Encoding": "gzip"})
        parts = config.exposition.render_parts(openmetrics, eof=False)
        parts.append(tail + (EOF if openmetrics else b""))
        return await stream_parts(request, parts, headers)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        ok, detail = config.ready()
        return web.Response(status=200 if ok else 503, text=detail + "\n")

    async def landing(_: web.Request) -> web.Response:
        return web.Response(text=landing_page(config), content_type="text/html")

    @web.middleware
    async def count_bugs(request: web.Request, handler: Handler) -> web.StreamResponse:
        """An exception escaping a handler is a bug: counted, logged, answered 500 by aiohttp."""
        try:
            return await handler(request)
        except (web.HTTPException, ConnectionError, asyncio.CancelledError):
            raise
        except Exception:
            log.exception("http_handler_failed", path=request.path)
            internal_errors.count("http")
            raise

    app = web.Application(middlewares=[count_bugs, *([config.guard.middleware] if config.guard else [])])
    app[GZIP_PAGES] = gzip_pages
    if config.guard is not None:
        app[GUARD] = config.guard
    app.add_routes(
        [
            web.get("/", landing),
            web.get("/metrics", metrics),
            web.get("/healthz", healthz),
            web.get("/readyz", readyz),
            *config.extra_routes,
        ]
    )
    return app


def landing_page(config: ServerConfig) -> str:
    """A small HTML page: name, version, links to each endpoint, and every source's health."""
    guarded = config.guard is not None
    endpoints = [("/metrics", "metrics (OpenMetrics or Prometheus text)"), *config.links,
                 ("/healthz", "liveness"), ("/readyz", "readiness: " + config.ready()[1])]
    items = "".join(
        f'<li><a href="{html.escape(path)}">{html.escape(path)}</a> {html.escape(what)}'
        f"{' (bearer token)' if guarded and path.partition('?')[0] not in OPEN_PATHS else ''}</li>"
        for path, what in endpoints
    )
    rows = []
    for h in sorted(config.sources(), key=lambda h: h.name):
        synced = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(h.last_sync)) if h.last_sync else "never"
        rows.append(
            f"<tr><td>{html.escape(h.name)}</td><td>{'up' if h.up else 'down'}</td><td>{synced}</td>"
            f"<td>{h.objects}</td><td>{h.errors}</td><td>{h.parse_errors}</td><td>{html.escape(h.detail)}</td></tr>"
        )
    title = html.escape(f"{config.title} {__version__}")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + title + "</title></head><body>\n"
        f"<h1>{title}</h1>\n<p>Kueue admission, topology placement, gang assembly and GPU interconnect, "
        "per job and per topology domain.</p>\n"
        f"<h2>Endpoints</h2>\n<ul>{items}</ul>\n"
        "<h2>Sources</h2>\n<table>\n<tr><th>source</th><th>state</th><th>last sync</th><th>objects</th>"
        "<th>errors</th><th>parse errors</th><th>detail</th></tr>\n" + "\n".join(rows) + "\n</table>\n"
        '<p><a href="https://github.com/gangscope/gangscope">gangscope</a></p>\n</body></html>\n'
    )


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
