"""TLS on /metrics with a certificate that rotates on disk (real openssl, real handshakes)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import ssl
import subprocess
from pathlib import Path

import aiohttp
import pytest

from exporter.exposition import Exposition
from exporter.serving import start

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")


def make_cert(dir_: Path, cn: str) -> tuple[Path, Path]:
    cert, key = dir_ / f"{cn}.crt", dir_ / f"{cn}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", f"/CN={cn}",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


async def peer_cn(port: int, ca: Path) -> str:
    ctx = ssl.create_default_context(cafile=str(ca))
    async with aiohttp.ClientSession() as s:
        async with s.get(f"https://127.0.0.1:{port}/metrics", ssl=ctx) as r:
            assert r.status == 200
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    cert = writer.get_extra_info("peercert")
    writer.close()
    await writer.wait_closed()
    return dict(x[0] for x in cert["subject"])["commonName"]


async def test_tls_serves_and_reloads_rotated_certificate(tmp_path: Path) -> None:
    a_cert, a_key = make_cert(tmp_path, "first")
    b_cert, b_key = make_cert(tmp_path, "second")
    live_cert, live_key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(a_cert, live_cert)
    shutil.copy(a_key, live_key)
    args = argparse.Namespace(listen="127.0.0.1:0", tls_cert=str(live_cert), tls_key=str(live_key), metrics_auth=False)
    serving = await start(args, Exposition(), lambda: (True, "ok"))
    try:
        assert await peer_cn(serving.port, a_cert) == "first"
        assert serving.tls is not None and not serving.tls.reload_if_changed()
        shutil.copy(b_cert, live_cert)
        shutil.copy(b_key, live_key)
        st = os.stat(live_cert)
        os.utime(live_cert, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        assert serving.tls.reload_if_changed()
        assert await peer_cn(serving.port, b_cert) == "second"
        # A broken pair on disk keeps the last good certificate.
        live_key.write_text("not a key")
        os.utime(live_key, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))
        assert not serving.tls.reload_if_changed()
        assert await peer_cn(serving.port, b_cert) == "second"
    finally:
        await serving.close()
