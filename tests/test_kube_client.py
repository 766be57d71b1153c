"""Credentials through the kubernetes package's loaders, and the client's typed errors, against
the simulated API server over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from pathlib import Path

import certifi
import pytest
import structlog
import yaml

from exporter.kube.client import ApiError, Forbidden, Gone, KubeClient, NotFound, TransportError, Unauthorized
from exporter.kube.credentials import Credentials, CredentialsError
from exporter.kube.resources import WORKLOADS
from exporter.sim.apiserver import SimApiServer, make_object

WL = "/apis/kueue.x-k8s.io/v1beta2/workloads"
SECRET = "s3cr3t-t0ken-value"


def two_context_kubeconfig(sim: SimApiServer, path: Path) -> str:
    cfg = sim.kubeconfig(token="wrong", context="other")
    good = sim.kubeconfig(context="sim")
    for key in ("clusters", "users", "contexts"):
        cfg[key] += good[key]
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


async def test_typed_errors(kube_sim: SimApiServer, kube_client: KubeClient) -> None:
    kube_sim.serve(WORKLOADS)
    for i in range(4):
        kube_sim.create(make_object(WORKLOADS, f"w{i}", "ns"))
    with pytest.raises(NotFound):
        await kube_client.get_json(WL + "/nope")
    with pytest.raises(NotFound):
        await kube_client.get_json("/apis/kueue.x-k8s.io/v1alpha9/workloads")
    page = await kube_client.get_json(WL, {"limit": "2"})
    kube_sim.compact()
    with pytest.raises(Gone) as gone:
        await kube_client.get_json(WL, {"limit": "2", "continue": page["metadata"]["continue"]})
    assert gone.value.status == 410 and gone.value.reason == "Expired"
    kube_sim.fail_next(1, 429, retry_after=7)
    with pytest.raises(ApiError) as limited:
        await kube_client.get_json(WL)
    assert limited.value.status == 429 and limited.value.retry_after == 7.0
    kube_sim.fail_next(1, 503)
    with pytest.raises(ApiError) as unavailable:
        await kube_client.get_json(WL)
    assert unavailable.value.status == 503 and unavailable.value.retry_after is None
    kube_sim.forbid(WORKLOADS)
    with pytest.raises(Forbidden):
        await kube_client.get_json(WL)


async def test_hung_server_times_out(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> None:
    client = await KubeClient.create(kubeconfig=kube_sim_kubeconfig, request_timeout=0.3)
    try:
        kube_sim.hang()
        start = time.monotonic()
        with pytest.raises(TransportError):
            await client.get_json("/api")
        assert time.monotonic() - start < 1.5
    finally:
        kube_sim.hang(False)
        await client.close()


async def test_connection_refused_is_a_transport_error(tmp_path: Path) -> None:
    sim = SimApiServer()
    await sim.start()
    path = sim.write_kubeconfig(str(tmp_path / "kc"))
    await sim.stop()
    client = await KubeClient.create(kubeconfig=path)
    try:
        with pytest.raises(TransportError):
            await client.get_json("/api")
    finally:
        await client.close()


async def test_post_json(kube_sim: SimApiServer, kube_client: KubeClient) -> None:
    kube_sim.add_token_user("t", "alice")
    review = await kube_client.post_json("/apis/authentication.k8s.io/v1/tokenreviews",
                                         {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "t"}})
    assert review["status"]["user"]["username"] == "alice"


async def test_401_reloads_the_kubeconfig_once(kube_sim: SimApiServer, kube_sim_kubeconfig: str, kube_client: KubeClient) -> None:
    await kube_client.get_json("/api")
    kube_sim.rotate_token("new-token")
    with pytest.raises(Unauthorized):  # the kubeconfig still has the old token
        await kube_client.get_json("/api")
    kube_sim.write_kubeconfig(kube_sim_kubeconfig, token="new-token")
    assert (await kube_client.get_json("/api"))["versions"] == ["v1"]
    assert kube_sim.requests["GET /api"] == 4  # ok, 401 (reload: unchanged), 401 (reload: new), ok


async def test_token_never_in_errors_or_logs(tmp_path: Path) -> None:
    sim = SimApiServer(token=SECRET)
    await sim.start()
    try:
        path = sim.write_kubeconfig(str(tmp_path / "kc"))
        client = await KubeClient.create(kubeconfig=path, request_timeout=0.3)
        sim.rotate_token("other")
        with structlog.testing.capture_logs() as logs:
            with pytest.raises(Unauthorized) as e:
                await client.get_json("/api")
            sim.hang()
            with pytest.raises(TransportError) as t:
                await client.get_json("/api")
            sim.hang(False)
        await client.close()
        for text in (str(e.value), repr(e.value), str(t.value), repr(t.value), json.dumps(logs, default=str),
                     repr(client.credentials)):
            assert SECRET not in text
    finally:
        await sim.stop()


def test_context_and_kubeconfig_env(kube_sim: SimApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = two_context_kubeconfig(kube_sim, tmp_path / "kc")
    assert asyncio_headers(Credentials.load(path))["Authorization"] == "Bearer wrong"  # current-context: other
    creds = Credentials.load(path, context="sim")
    assert asyncio_headers(creds)["Authorization"] == "Bearer sim-token" and "context sim" in creds.description
    # No --kubeconfig and not in a pod: $KUBECONFIG, then ~/.kube/config.
    creds = Credentials.load(environ={"KUBECONFIG": path}, context="sim")
    assert creds.host == kube_sim.url and creds.description.startswith(f"kubeconfig {path}")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(Path(path).read_text())
    monkeypatch.setenv("HOME", str(home))
    assert Credentials.load(environ={}).host == kube_sim.url
    with pytest.raises(CredentialsError):
        Credentials.load(str(tmp_path / "missing"))


def asyncio_headers(creds: Credentials) -> dict[str, str]:
    return asyncio.run(creds.headers())


def test_exec_plugin_token(kube_sim: SimApiServer, tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json; print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
                      "'kind': 'ExecCredential', 'status': {'token': 'from-exec'}}))")
    cfg = kube_sim.kubeconfig()
    cfg["users"][0]["user"] = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                                        "args": [str(plugin)], "interactiveMode": "Never"}}
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(cfg))
    assert asyncio_headers(Credentials.load(str(path)))["Authorization"] == "Bearer from-exec"


def test_in_cluster_token_rotation_and_tls(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first")
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    creds = Credentials.load(token_file=str(token), ca_file=certifi.where(), environ=env)
    assert creds.description == "in-cluster" and creds.host == "https://10.0.0.1:443"
    assert isinstance(creds.ssl, ssl.SSLContext) and creds.ssl.verify_mode == ssl.CERT_REQUIRED
    assert asyncio_headers(creds) == {"Authorization": "Bearer first"}
    token.write_text("second")  # kubelet rotates the projected token
    os.utime(token, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert asyncio_headers(creds) == {"Authorization": "Bearer second"}
    insecure = Credentials.load(token_file=str(token), ca_file=certifi.where(), environ=env, insecure=True)
    assert isinstance(insecure.ssl, ssl.SSLContext) and insecure.ssl.verify_mode == ssl.CERT_NONE


async def test_watch_discards_a_partial_line(kube_sim: SimApiServer, kube_client: KubeClient) -> None:
    kube_sim.serve(WORKLOADS)
    kube_sim.create(make_object(WORKLOADS, "a", "ns"))
    kube_sim.create(make_object(WORKLOADS, "b", "ns"))
    kube_sim.drop_after_events, kube_sim.drop_mid_event = 1, True
    seen = []
    with pytest.raises(TransportError):
        async for event in kube_client.watch(WL, {"resourceVersion": "0"}):
            seen.append(event["object"]["metadata"]["name"])
    assert seen == ["a"]


async def test_watch_ends_cleanly_at_server_timeout(kube_sim: SimApiServer, kube_client: KubeClient) -> None:
    kube_sim.serve(WORKLOADS)
    events = [e async for e in kube_client.watch(WL, {"resourceVersion": "0", "timeoutSeconds": "0.2"})]
    assert events == []


def make_pki(d: Path) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with openssl."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=sim-ca")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        (d / f"{name}.ext").write_text(ext + "\n")
        run("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext")
    return {n: str(d / n) for n in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")}


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_tls_with_ca_and_client_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki["ca.crt"])
    server_ctx.load_cert_chain(pki["server.crt"], pki["server.key"])
    server_ctx.verify_mode = ssl.CERT_REQUIRED  # like an API server checking client certificates
    sim = SimApiServer(token=None)
    await sim.start(ssl_context=server_ctx)
    try:
        cfg = sim.kubeconfig(**{"certificate-authority": pki["ca.crt"]})
        cfg["users"][0]["user"] = {"client-certificate": pki["client.crt"], "client-key": pki["client.key"]}
        good = tmp_path / "good"
        good.write_text(yaml.safe_dump(cfg))
        del cfg["clusters"][0]["cluster"]["certificate-authority"]
        no_ca = tmp_path / "no-ca"
        no_ca.write_text(yaml.safe_dump(cfg))
        for path, insecure, ok in ((good, False, True), (no_ca, False, False), (no_ca, True, True)):
            client = await KubeClient.create(kubeconfig=str(path), insecure=insecure, request_timeout=2.0)
            try:
                if ok:
                    assert (await client.get_json("/api"))["versions"] == ["v1"]
                else:
                    with pytest.raises(TransportError, match="(?i)certificate"):
                        await client.get_json("/api")
            finally:
                await client.close()
    finally:
        await sim.stop()


async def test_an_unreachable_api_server_is_one_clear_line_and_readyz_says_why(tmp_path: Path) -> None:
    """Against a closed port, the whole collector (two dozen sources, each retrying with
    millisecond backoff) logs one warning: the URL, the error, what to check; no source repeats
    it, no aiohttp object repr appears, and /readyz gives that reason once for every source."""
    import aiohttp

    from collectors import make_collector

    sim = SimApiServer()
    await sim.start()
    path = sim.write_kubeconfig(str(tmp_path / "kc"))
    url = sim.url
    await sim.stop()
    collector = make_collector(path)
    with structlog.testing.capture_logs() as logs:
        await collector.start()
        try:
            # many attempts (millisecond backoff) before /readyz is asked: polled, not a fixed sleep,
            # so a loaded machine only takes longer
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while (sum(1 for e in logs if e["event"] in ("kube_discovery_failed", "kube_list_failed")) <= 20
                   and loop.time() < deadline):
                await asyncio.sleep(0.05)
            async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{collector.port}/readyz") as r:
                status, body = r.status, await r.text()
        finally:
            await collector.stop()
    port = url.rsplit(":", 1)[1]
    cause = (f"cannot reach the API server at {url}: Connection refused: check the kubeconfig's server (in a pod: "
             "KUBERNETES_SERVICE_HOST), that the API server is up, and the network path to it")
    warnings = [e for e in logs if e["log_level"] in ("warning", "error")]
    assert [(e["event"], e["url"], e["error"]) for e in warnings] == [("kube_api_unreachable", url, cause)]
    assert not [e for e in logs if "SSLContext" in json.dumps(e, default=str)]
    assert sum(1 for e in logs if e["event"] in ("kube_discovery_failed", "kube_list_failed")) > 20  # at debug
    assert status == 503
    assert body.startswith("waiting for first sync of: workloads, localqueues, ")
    assert body.count(f"(discovery: {cause})") == 1 and port in body


def test_repeats_are_held_back_and_counted() -> None:
    from exporter.logs import Repeats

    now = [0.0]
    repeats = Repeats(interval=60, clock=lambda: now[0])
    with structlog.testing.capture_logs() as logs:
        log = structlog.get_logger("t")
        for t in range(0, 130, 10):  # every 10 s for 2 minutes
            now[0] = float(t)
            repeats.log(log, "warning", "kube_list_failed", ("workloads", "500 Error"), error="500 Error")
        repeats.log(log, "warning", "kube_list_failed", ("nodes", "500 Error"), error="500 Error")  # another source
    assert [(e.get("repeated"), e["error"]) for e in logs] == [(None, "500 Error"), (5, "500 Error"), (5, "500 Error"),
                                                                (None, "500 Error")]
