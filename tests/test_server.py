"""The shared aiohttp app over real HTTP: negotiation, gzip, health and readiness."""

from __future__ import annotations

import asyncio
import gzip

import aiohttp

from exporter.exposition import Exposition, Family
from exporter.server import GZIP_PAGES, ServerConfig, bound_port, build_app, parse_listen, start_server, wants_openmetrics

G = Family("gangscope_test_gauge", "gauge", "A gauge.", ("a",))


async def test_metrics_negotiation_gzip_and_health() -> None:
    expo = Exposition()
    expo.register(G)
    expo.set("o", {G: [G.sample(["b"], 1)]})
    ready = {"ok": False}
    runner = await start_server(build_app(ServerConfig(expo, lambda: (ready["ok"], "detail"))), "127.0.0.1:0")
    base = f"http://127.0.0.1:{bound_port(runner)}"
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as s:
            async with s.get(base + "/metrics", headers={"Accept-Encoding": "identity"}) as r:
                assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                body = await r.text()
                assert 'gangscope_test_gauge{a="b"} 1\n' in body and "# EOF" not in body
            accept = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1"
            async with s.get(base + "/metrics", headers={"Accept": accept, "Accept-Encoding": "gzip"}) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text")
                assert r.headers["Content-Encoding"] == "gzip"
                assert gzip.decompress(await r.read()).decode().endswith("# EOF\n")
            async with s.get(base + "/healthz") as r:
                assert r.status == 200
            async with s.get(base + "/readyz") as r:
                assert r.status == 503
            ready["ok"] = True
            async with s.get(base + "/readyz") as r:
                assert r.status == 200
    finally:
        await runner.cleanup()


def test_accept_parsing_and_listen() -> None:
    assert wants_openmetrics("application/openmetrics-text; version=1.0.0")
    assert not wants_openmetrics("application/openmetrics-text;q=0,text/plain")
    assert not wants_openmetrics("text/plain;version=0.0.4")
    assert parse_listen(":9400") == ("0.0.0.0", 9400)
    assert parse_listen("[::1]:9400") == ("::1", 9400)


async def test_large_exposition_streams_whole_and_head_has_no_body() -> None:
    """More owners than one write holds: the streamed body (plain and gzip) is exactly render()."""
    from exporter.server import PARTS_PER_WRITE

    expo = Exposition()
    expo.register(G)
    for i in range(PARTS_PER_WRITE * 2 + 7):
        expo.set(i, {G: [G.sample([f"v{i}"], i)]})
    runner = await start_server(build_app(ServerConfig(expo, lambda: (True, ""))), "127.0.0.1:0")
    url = f"http://127.0.0.1:{bound_port(runner)}/metrics"
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as s:
            async with s.get(url, headers={"Accept-Encoding": "identity"}) as r:
                body = await r.read()
                assert body == expo.render(False) and int(r.headers["Content-Length"]) == len(body)
            async with s.get(url, headers={"Accept-Encoding": "gzip", "Accept": "application/openmetrics-text"}) as r:
                assert gzip.decompress(await r.read()) == expo.render(True)
            for encoding in ("identity", "gzip"):
                async with s.head(url, headers={"Accept-Encoding": encoding}) as r:
                    assert r.status == 200 and await r.read() == b""
    finally:
        await runner.cleanup()


async def test_gzip_page_is_compressed_once_per_change_and_shared() -> None:
    """Concurrent gzip scrapes of an unchanged exposition share one compression; a change
    recompresses only the block of owners it touched (the body is several gzip members)."""
    expo = Exposition()
    expo.register(G)
    for i in range(5000):
        expo.set(("o", i), {G: [G.sample([str(i)], i)]})
    app = build_app(ServerConfig(expo, lambda: (True, "ok")))
    runner = await start_server(app, "127.0.0.1:0")
    url = f"http://127.0.0.1:{bound_port(runner)}/metrics"
    headers = {"Accept-Encoding": "gzip"}
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as s:

            async def scrape() -> bytes:
                async with s.get(url, headers=headers) as r:
                    assert r.headers["Content-Encoding"] == "gzip"
                    return gzip.decompress(await r.read())

            bodies = await asyncio.gather(*(scrape() for _ in range(20)))
            assert all(b == expo.render(False) for b in bodies)
            blocks = [b for b in expo.render_blocks(False) if not isinstance(b, bytes)]
            assert app[GZIP_PAGES].compressions == len(blocks) > 50
            expo.set(("o", 0), {G: [G.sample(["0"], 42)]})
            assert 'gangscope_test_gauge{a="0"} 42\n' in (await scrape()).decode()
            assert app[GZIP_PAGES].compressions == len(blocks) + 1, "only the changed block again"
            expo.delete(("o", 4999))
            assert (await scrape()) == expo.render(False)
            assert app[GZIP_PAGES].compressions == len(blocks) + 2
    finally:
        await runner.cleanup()
