"""No secret ever reaches a log line, an error message or a served page.

The collector talks HTTPS to the simulated API server with a distinctive bearer token and a
client certificate whose key comes inline in the kubeconfig (openssl-made). Every failure it
can meet is forced (401, 403, 500, connection refused) while all output is captured: structlog
at debug level, the standard library's loggers, stdout/stderr, each source's health detail,
``/readyz`` and ``/metrics``. Scrapers' bad bearer tokens under ``--metrics-auth`` and broken
kubeconfigs given to the real CLI get the same check. None may contain the token or any piece
of the key.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from exporter.kube.resources import LOCAL_QUEUES, NODES, TOPOLOGIES, WORKLOADS
from exporter.logs import setup_logging
from exporter.sim.apiserver import SimApiServer
from kueue_objects import admitted_conditions, workload
from waiting import eventually
from collectors import make_collector

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "gsK8sTok-9f2c41d7e8b3a6055c1e"  # the collector's own API token
SCRAPER_TOKENS = ["scraperBad-77d1e0c4a9f3b2", "scraperForbidden-1a2b3c4d5e6f", "scraperLate-0e9d8c7b6a5f"]


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_pki(d: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate/key, all signed by the CA."""
    p = {n: d / n for n in ("ca.key", "ca.crt", "srv.key", "srv.csr", "srv.crt", "cli.key", "cli.csr", "cli.crt", "ext")}
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=sim-ca",
            "-keyout", str(p["ca.key"]), "-out", str(p["ca.crt"]))
    p["ext"].write_text("subjectAltName=IP:127.0.0.1\n")
    for who, cn in (("srv", "127.0.0.1"), ("cli", "gangscope")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", str(p[f"{who}.key"]),
                "-out", str(p[f"{who}.csr"]))
        openssl("x509", "-req", "-in", str(p[f"{who}.csr"]), "-CA", str(p["ca.crt"]), "-CAkey", str(p["ca.key"]),
                "-CAcreateserial", "-days", "1", "-out", str(p[f"{who}.crt"]),
                *(["-extfile", str(p["ext"])] if who == "srv" else []))
    return p


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(url: str, pki: dict[str, Path], **user_overrides: str) -> dict:
    user = {"token": TOKEN, "client-certificate-data": b64(pki["cli.crt"]), "client-key-data": b64(pki["cli.key"]),
            **user_overrides}
    return {"apiVersion": "v1", "kind": "Config", "current-context": "sim",
            "clusters": [{"name": "sim", "cluster": {"server": url, "certificate-authority-data": b64(pki["ca.crt"])}}],
            "users": [{"name": "sim", "user": user}],
            "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}]}


def secret_fragments(pki: dict[str, Path]) -> list[str]:
    """The token, every line of the key's PEM body, and pieces of the key as kubeconfig data."""
    pem_lines = [ln for ln in pki["cli.key"].read_text().splitlines() if ln and not ln.startswith("-----")]
    data = b64(pki["cli.key"])
    return [TOKEN, *SCRAPER_TOKENS, *pem_lines, *(data[i:i + 32] for i in range(0, len(data) - 32, 97))]


def assert_clean(text: str, fragments: list[str], what: str) -> None:
    leaked = [f for f in fragments if f in text]
    assert not leaked, f"{what} contains secret material: {leaked[:3]}"


class Capture(logging.Handler):
    """Every standard-library log record (aiohttp, asyncio, kubernetes), fully formatted."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


async def get(port: int, path: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}", headers=headers) as r:
        return r.status, await r.text()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def test_no_secret_in_logs_or_errors_under_api_faults(pki: dict[str, Path], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    logs = io.StringIO()
    setup_logging("debug", stream=logs)
    capture = Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)

    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(pki["srv.crt"], pki["srv.key"])
    server_tls.load_verify_locations(pki["ca.crt"])
    server_tls.verify_mode = ssl.CERT_REQUIRED  # the client key is really used in every handshake
    sim = SimApiServer(TOKEN, bookmark_interval=0.2)
    await sim.start(ssl_context=server_tls)
    for r in (WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, NODES):
        sim.serve(r)
    sim.create(workload("w1", conditions=admitted_conditions()))
    sim.add_token_user(SCRAPER_TOKENS[1], "mallory")
    sim.add_token_user(SCRAPER_TOKENS[2], "prometheus")
    sim.allow_non_resource("prometheus", "get", "/metrics")
    kc = tmp_path / "kubeconfig"
    kc.write_text(yaml.safe_dump(kubeconfig(sim.url, pki)))
    collector = make_collector(str(kc), "--metrics-auth", "--log-level", "debug", discovery_interval=0.1,
                               request_timeout=1.0, watch_read_slack=0.5, connect_timeout=0.5)
    pages: list[str] = []
    details: list[str] = []
    workloads = None
    try:
        await collector.start()
        await collector.sources.wait_ready(5)
        workloads = collector.sources.sources[WORKLOADS.source].health
        port = collector.port

        async def snapshot() -> None:
            details.extend(s.health.detail for s in collector.sources.sources.values())
            for path in ("/readyz", "/healthz"):
                pages.append((await get(port, path))[1])
            pages.append((await get(port, "/metrics", SCRAPER_TOKENS[2]))[1])

        # Scrapers: an unknown token, a known one without the rule, an allowed one.
        assert (await get(port, "/metrics", SCRAPER_TOKENS[0]))[0] == 401
        assert (await get(port, "/metrics", SCRAPER_TOKENS[1]))[0] == 403
        assert (await get(port, "/metrics", SCRAPER_TOKENS[2]))[0] == 200

        # 500s on the relist after a cut stream.
        sim.fail_next(6, 500, match="/workloads")
        sim.drop_watches(mid_event=True)
        await eventually(lambda: "500" in workloads.detail)
        await snapshot()
        # 403: RBAC withdrawn from the resource.
        sim.forbid(WORKLOADS)
        sim.drop_watches()
        await eventually(lambda: "forbidden" in workloads.detail)
        await snapshot()
        sim.forbid(WORKLOADS, False)
        # 401: the API server stops accepting the token (rotated elsewhere, reload gives the same one).
        sim.rotate_token("someone-elses-token")
        sim.drop_watches()
        await eventually(lambda: "401" in workloads.detail or "Unauthorized" in workloads.detail)
        await snapshot()
        sim.rotate_token(TOKEN)
        # Connection refused: the API server is gone; scrapes with an uncached token get 503.
        await sim.stop()
        await eventually(lambda: "Cannot connect" in workloads.detail or "Connect" in workloads.detail)
        assert (await get(port, "/metrics", "scraperNew-4c4c4c4c4c"))[0] == 503
        await snapshot()
    finally:
        await collector.stop()
        await sim.stop()
        root.removeHandler(capture)
        root.setLevel(old_level)
        setup_logging("info")

    text = logs.getvalue()
    # The faults really happened and were logged: the check below covers real error paths.
    for event in ("kube_watch_failed", "kube_source_forbidden", "metrics_auth_error", "metrics_auth_forbidden"):
        assert event in text, f"{event} was not logged"
    out = capsys.readouterr()
    fragments = secret_fragments(pki) + ["scraperNew-4c4c4c4c4c"]
    assert_clean(text, fragments, "structlog output")
    assert_clean("\n".join(capture.lines), fragments, "standard logging")
    assert_clean(out.out + out.err, fragments, "stdout/stderr")
    assert_clean("\n".join(details), fragments, "source health details")
    assert_clean("\n".join(pages), fragments, "served pages")


BROKEN = {
    "yaml-error-on-token-line": lambda kc: kc.replace(f"token: {TOKEN}", f"token: {TOKEN}: [unclosed"),
    "bad-base64-key": lambda kc: _truncate_key(kc),
    "not-a-key": lambda kc: _replace_key(kc, base64.b64encode(f"{TOKEN} is not a PEM key".encode()).decode()),
    "missing-cluster": lambda kc: kc.replace("clusters:", "clusterz:"),
}


def _key_value(kc: str) -> str:
    return next(ln.split("client-key-data: ", 1)[1] for ln in kc.splitlines() if "client-key-data: " in ln)


def _truncate_key(kc: str) -> str:
    value = _key_value(kc)
    return kc.replace(value, value[:-7] + "A")


def _replace_key(kc: str, new: str) -> str:
    return kc.replace(_key_value(kc), new)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_no_secret_when_the_kubeconfig_is_broken(case: str, pki: dict[str, Path], tmp_path: Path) -> None:
    """The real CLI fails on a broken kubeconfig; whatever it prints holds no token or key."""
    good = yaml.safe_dump(kubeconfig("https://127.0.0.1:1", pki), width=1_000_000)
    kc = tmp_path / "kubeconfig"
    kc.write_text(BROKEN[case](good))
    assert kc.read_text() != good
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", "collector", "--kubeconfig", str(kc), "--listen", "127.0.0.1:0",
         "--log-level", "debug"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "no_credentials" in proc.stderr and "Traceback" not in proc.stderr
    assert_clean(proc.stdout + proc.stderr, secret_fragments(pki), f"CLI output ({case})")
