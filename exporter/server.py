"""The aiohttp app both processes serve: /metrics with format negotiation, /healthz, /readyz.

The scrape handler never computes anything: it asks the process's :class:`Exposition` for the
already rendered pieces and streams them. Streaming measured faster than joining one body
(bench/collector.py, 20,000 Workloads, client in the same process: ~170 against ~350 ms) and
never holds a second copy of the page.

Gzip, which Prometheus always asks for, is the one costly step (a 100 MB page is ~0.13 s of one
core with ISA-L). The gzip body is built from compressed segments, one per block of owners,
each kept until its block changes (:class:`GzipPages`): a scrape compresses only what changed
since the last one, in worker threads (ISA-L releases the GIL), and the event loop keeps
serving. The segments are small (the page compresses ~14x), so keeping them costs little memory.
Everything else (watch events, NVML samples) happens off the scrape path.

The one exception is the process's own figures (CPU seconds, RSS, open fds: ``live``), which
change between any two scrapes and cost microseconds: they are rendered per scrape and appended
to the page, as one more segment.

``/`` is a landing page naming the process, its version, its endpoints and its sources' health,
as node_exporter, kube-state-metrics and dcgm-exporter have; with ``--metrics-auth`` every other
route except the probes is guarded (:mod:`exporter.auth`).
"""

from __future__ import annotations

import asyncio
import html
import os
import ssl
import struct
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import structlog
from aiohttp import web
from isal import isal_zlib

from . import __version__
from .auth import GUARD, OPEN_PATHS, Guard
from .exposition import EOF, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, Block, Exposition, with_labels
from .health import InternalErrors, SourceHealth

log = structlog.get_logger(__name__)

ReadyCheck = Callable[[], tuple[bool, str]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# gzip level 1: scrape payloads are repetitive text; level 1 gets most of the size win at a
# fraction of the CPU of the default level 9 (a 20,000-workload page compresses ~14x). Compressed
# with ISA-L (the isal package's igzip): the same deflate format at ~3.5x zlib's speed and the
# same ratio at level 1 on gangscope pages (README, performance: 795 against 230 MB/s).
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
            # A fast reader drains every write at once, and then write() never yields: give the
            # watch events their turn between megabytes, or a 150 MB page holds them for 0.6 s.
            await asyncio.sleep(0)
        await resp.write_eof()
    except ConnectionResetError:  # the scraper went away mid-response: nothing to answer
        pass
    return resp


# The pieces of one gzip member: its fixed header (no name, no time: RFC 1952 2.3, OS "unknown"),
# the deflate stream's closing empty final block, and the trailer (CRC-32 and size of the data).
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
DEFLATE_END = isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, -isal_zlib.MAX_WBITS).flush()

Segment = tuple[bytes, int, int]  # (raw deflate blocks ending on a byte boundary, CRC-32 of the data, its length)


def deflate_segment(data: bytes) -> Segment:
    """``data`` compressed on its own, as raw deflate blocks that end on a byte boundary with the
    stream still open (a sync flush): segments compressed apart can follow one another in one
    deflate stream, since none refers back to the bytes before it (RFC 1951 3.2.4)."""
    compressor = isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, -isal_zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush(isal_zlib.Z_SYNC_FLUSH), isal_zlib.crc32(data), len(data)


def gzip_of(segments: list[Segment]) -> bytes:
    """One gzip member of the segments' data, in order: the CRC-32 of the whole is combined from
    theirs (crc32_combine, a few microseconds each), not computed over the page again."""
    crc = total = 0
    for _, c, n in segments:
        crc = isal_zlib.crc32_combine(crc, c, n)
        total += n
    return b"".join((GZIP_HEADER, *(s for s, _, _ in segments), DEFLATE_END,
                     struct.pack("<II", crc & 0xFFFFFFFF, total & 0xFFFFFFFF)))


def _compress_blocks(batch: list[list[bytes]]) -> list[Segment]:
    """One worker thread's share: each block's chunks as a segment (ISA-L releases the GIL)."""
    return [deflate_segment(b"".join(chunks)) for chunks in batch]


class GzipPages:
    """The gzipped page, built from deflate segments, one per family header and one per block of
    owners (:class:`exporter.exposition.Block`), a block's segment kept until its version moves.

    Each segment is compressed on its own and ends on a byte boundary without closing the
    stream, so the segments in page order, between one gzip header and one trailer whose CRC-32
    is combined from theirs, are one ordinary gzip member that any client reads (RFC 1952,
    RFC 1951 3.2.4; tests/test_gzip_members.py: aiohttp, Python's gzip and Debian's Prometheus).
    A scrape compresses only the blocks that changed since they were last compressed, split over
    worker threads, and joins the rest as they are: under churn the work follows the changes,
    not the page (bench/churn.py, bench/gzip_options.py), and an unchanged page costs a join.
    Concurrent scrapes of one exposition generation share one build; the process's own lines
    (``tail``) are one more small segment per scrape.
    """

    def __init__(self, exposition: Exposition, workers: int | None = None) -> None:
        self.exposition = exposition
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self._segments: weakref.WeakKeyDictionary[Block, tuple[int, Segment]] = weakref.WeakKeyDictionary()
        self._headers: dict[bytes, Segment] = {}
        self._builds: dict[bool, tuple[int, asyncio.Future[list[Segment]]]] = {}
        self.compressions = 0  # blocks compressed, for tests

    async def get(self, openmetrics: bool, tail: bytes = b"") -> bytes:
        """The page, then ``tail`` (lines rendered for this scrape) and ``# EOF`` where due."""
        generation = self.exposition.generation
        build = self._builds.get(openmetrics)
        if build is None or build[0] != generation:
            build = (generation, asyncio.ensure_future(self._build(openmetrics)))
            self._builds[openmetrics] = build
        # shield: a scraper that goes away must not cancel the build the others wait for
        segments = await asyncio.shield(build[1])
        return gzip_of([*segments, deflate_segment(tail + (EOF if openmetrics else b""))])

    async def _build(self, openmetrics: bool) -> list[Segment]:
        segments: list[Segment] = []
        todo: list[tuple[int, Block, int, list[bytes]]] = []
        for item in self.exposition.render_blocks(openmetrics):  # on the loop: a consistent snapshot
            if isinstance(item, bytes):
                segment = self._headers.get(item)
                if segment is None:
                    segment = self._headers[item] = deflate_segment(item)
                segments.append(segment)
                continue
            cached = self._segments.get(item)
            if cached is not None and cached[0] == item.version:
                segments.append(cached[1])
            else:
                todo.append((len(segments), item, item.version, list(item.chunks.values())))
                segments.append((b"", 0, 0))
        if todo:
            n = min(self.workers, len(todo))
            batches = [[chunks for _, _, _, chunks in todo[i::n]] for i in range(n)]
            results = await asyncio.gather(*(asyncio.to_thread(_compress_blocks, b) for b in batches))
            for i in range(n):
                for (index, block, version, _), segment in zip(todo[i::n], results[i]):
                    segments[index] = segment
                    if block.version == version:  # unchanged while it was compressed: keep it
                        self._segments[block] = (version, segment)
            self.compressions += len(todo)
        return segments


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
    # Routes named with their query's shape (path, what), shown as text: no link to a placeholder.
    routes: list[tuple[str, str]] = field(default_factory=list)
    # A section of live links, e.g. the collector's jobs worth a look: (heading, [(href, label, why)]).
    featured: Callable[[], tuple[str, list[tuple[str, str, str]]]] | None = None


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
        if tail and config.exposition.const_labels:
            tail = with_labels(tail, config.exposition.const_labels)
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
    """A small HTML page: name, version, links to each endpoint (and a live section, such as the
    collector's jobs worth a look, each a working link), and every source's health."""
    guarded = config.guard is not None
    endpoints = [("/metrics", "metrics (OpenMetrics or Prometheus text)"), *config.links,
                 ("/healthz", "liveness"), ("/readyz", "readiness: " + config.ready()[1])]
    items = "".join(
        f'<li><a href="{html.escape(path)}">{html.escape(path)}</a> {html.escape(what)}'
        f"{' (bearer token)' if guarded and path.partition('?')[0] not in OPEN_PATHS else ''}</li>"
        for path, what in endpoints
    ) + "".join(f"<li><code>{html.escape(path)}</code> {html.escape(what)}</li>" for path, what in config.routes)
    featured = ""
    if config.featured is not None:
        heading, entries = config.featured()
        listed = "".join(f'<li><a href="{html.escape(href)}">{html.escape(label)}</a> {html.escape(why)}</li>'
                         for href, label, why in entries)
        featured = f"<h2>{html.escape(heading)}</h2>\n" + (f"<ul>{listed}</ul>\n" if listed else "<p>none now</p>\n")
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
        f"{featured}<h2>Endpoints</h2>\n<ul>{items}</ul>\n"
        "<h2>Sources</h2>\n<table>\n<tr><th>source</th><th>state</th><th>last sync</th><th>objects</th>"
        "<th>errors</th><th>parse errors</th><th>detail</th></tr>\n" + "\n".join(rows) + "\n</table>\n"
        '<p><a href="https://github.com/gangscope/gangscope">gangscope</a></p>\n</body></html>\n'
    )


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9400`` for IPv6, ``:9400`` for all interfaces)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen wants HOST:PORT (a port 0-65535), got {value!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


async def start_server(app: web.Application, listen: str, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    """Start serving; returns the runner (``await runner.cleanup()`` stops it). Port 0 picks a free one."""
    host, port = parse_listen(listen)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    try:
        await site.start()
    except BaseException:  # a port in use: the runner's cleanup is the caller's no longer
        await runner.cleanup()
        raise
    return runner


def bound_port(runner: web.AppRunner) -> int:
    """The port actually bound (useful with ``--listen 127.0.0.1:0``)."""
    for site in runner.sites:
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            return int(server.sockets[0].getsockname()[1])
    raise RuntimeError("server is not started")
