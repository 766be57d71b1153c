"""A small asyncio Kubernetes API client: JSON GET/POST/PUT and WATCH streams over one aiohttp session.

Only what list/watch consumers need, with raw dicts decoded by orjson (the generated model
classes of the ``kubernetes`` package are far too slow for 20,000-object lists; the package is
used for credentials only, see :mod:`.credentials`). Failures are typed so callers can decide:
410 relists, 403/404 send a source back to discovery, 429 carries ``Retry-After``, 401 has
already been retried once with reloaded credentials. Error messages quote the server's Status
message and the path, never a request header.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import aiohttp
import msgspec
import orjson
import structlog

from ..logs import redact
from .credentials import Credentials, CredentialsError

log = structlog.get_logger(__name__)

JSON = "application/json"
USER_AGENT = "gangscope/0.1"
MAX_RETRY_AFTER = 600.0
# A watch may stay silent for minutes (bookmarks come about once a minute), so a read timeout
# cannot tell a quiet stream from a dead peer (a node or a load balancer gone without a FIN).
# TCP keepalive can: probes after 15 s of silence, every 5 s, 6 unanswered ones drop the
# connection, and TCP_USER_TIMEOUT bounds unacknowledged data the same way: a dead connection is
# noticed within 45 s and the watch resumes elsewhere. client-go gets the same from HTTP/2 pings
# (k8s.io/apimachinery pkg/util/net/http.go: ReadIdleTimeout 30 s, PingTimeout 15 s); aiohttp
# speaks HTTP/1.1, so the kernel does it.
KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES = 15, 5, 6
DEAD_CONNECTION_SECONDS = KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_PROBES


def keepalive_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """A TCP socket that notices a dead peer within :data:`DEAD_CONNECTION_SECONDS`."""
    family, type_, proto = addr_info[0], addr_info[1], addr_info[2]
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
                          ("TCP_KEEPCNT", KEEPALIVE_PROBES), ("TCP_USER_TIMEOUT", DEAD_CONNECTION_SECONDS * 1000)):
        if hasattr(socket, option):  # Linux; macOS lacks some (then its defaults apply)
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)
    return sock


class ApiError(Exception):
    """A failed request. ``status`` 0 means no HTTP answer (connection, timeout, cut stream)."""

    def __init__(self, status: int, reason: str, message: str = "", retry_after: float | None = None):
        self.status = status
        self.reason = reason
        self.message = redact(message)
        self.retry_after = retry_after
        super().__init__(f"{status} {reason}: {self.message}" if message else f"{status} {reason}")


class Unauthorized(ApiError):
    """401 even after reloading the credentials."""


class Forbidden(ApiError):
    """403: RBAC does not allow it."""


class NotFound(ApiError):
    """404: the object, or the resource itself (CRD not installed, version not served)."""


class Gone(ApiError):
    """410: the resourceVersion or continue token is too old; relist."""


class TransportError(ApiError):
    """No (complete) HTTP answer: refused, reset, timed out, or a stream cut mid-way.

    ``str()`` is what went wrong and what to check, without the request (``what``: its method
    and path, for the logs), so the same failure reads the same for every source; ``connect``
    says the connection itself failed (the API server unreachable, or its certificate refused),
    which :class:`Reachability` reports once for the whole client."""

    def __init__(self, message: str, what: str = "", connect: bool = False):
        super().__init__(0, "Transport", message)
        self.what, self.connect = what, connect

    def __str__(self) -> str:
        return self.message


def describe(e: BaseException, host: str) -> tuple[str, bool]:
    """(one sentence: what failed and what to check, connect-level or not) for a request that got
    no HTTP answer. aiohttp's own texts name objects (``ssl:<ssl.SSLContext object at 0x...>``)
    and leave out the URL; this says which server, the error, and where to look."""
    if isinstance(e, aiohttp.ClientConnectorCertificateError):
        return (f"cannot verify the TLS certificate of {host} ({e.certificate_error}): check the kubeconfig's "
                "certificate-authority for this server", True)
    if isinstance(e, (aiohttp.ClientConnectorSSLError, aiohttp.ClientSSLError)):
        return f"TLS handshake with {host} failed ({getattr(e, 'os_error', e)}): check that the server speaks HTTPS", True
    if isinstance(e, aiohttp.ClientConnectorError):
        errno = e.os_error.errno
        why = os.strerror(errno) if errno else e.os_error.strerror or str(e.os_error) or type(e.os_error).__name__
        return (f"cannot reach the API server at {host}: {why}: check the kubeconfig's server (in a pod: "
                "KUBERNETES_SERVICE_HOST), that the API server is up, and the network path to it", True)
    if isinstance(e, (TimeoutError, asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return f"no answer from {host} in time: check the network path and the API server's load", False
    if isinstance(e, aiohttp.ServerDisconnectedError):
        return f"{host} closed the connection before answering", False
    return f"{type(e).__name__} from {host}: {e}", False


class Reachability:
    """Says once that the API server cannot be reached (the URL, the error, what to check), then
    only how often it failed since, every ``interval`` seconds; and once that it is back."""

    def __init__(self, host: str, interval: float = 60.0) -> None:
        from ..logs import Repeats

        self.host, self.failing = host, ""
        self.quiet = False  # a one-shot command that prints ``failing`` as its error itself
        self._repeats = Repeats(interval)

    def failed(self, cause: str) -> None:
        self.failing = cause
        if not self.quiet:
            self._repeats.log(log, "warning", "kube_api_unreachable", (cause,), url=self.host, error=cause)

    def answered(self) -> None:
        if self.failing:
            log.info("kube_api_reachable", url=self.host)
            self.failing = ""
            self._repeats.forget("kube_api_unreachable")


_BY_STATUS: dict[int, type[ApiError]] = {401: Unauthorized, 403: Forbidden, 404: NotFound, 410: Gone}


def error_from_status(status: int, body: bytes, retry_after: float | None = None) -> ApiError:
    """The typed error for a non-2xx answer or an ERROR watch event's Status object."""
    reason, message = "", ""
    try:
        doc = orjson.loads(body) if body else {}
        if isinstance(doc, dict):
            reason, message = str(doc.get("reason") or ""), str(doc.get("message") or "")
    except orjson.JSONDecodeError:
        message = body[:200].decode("utf-8", "replace")
    return _BY_STATUS.get(status, ApiError)(status, reason or "Error", message, retry_after)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER)
    except ValueError:
        return None  # an HTTP date: rare from the API server; the caller's backoff applies


class KubeClient:
    """One aiohttp session to one API server. Create with :meth:`create`, end with :meth:`close`."""

    def __init__(self, credentials: Credentials, *, request_timeout: float = 30.0, connect_timeout: float = 10.0,
                 watch_read_slack: float = 30.0):
        self.credentials = credentials
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        # A watch is silent for at most its timeoutSeconds (bookmarks aside); past that plus this
        # slack the server is presumed gone and the stream is abandoned.
        self.watch_read_slack = watch_read_slack
        self.reachability = Reachability(credentials.host)
        from ..logs import Repeats

        self.repeats = Repeats()  # the failures its sources log (report_failure)
        self._session = aiohttp.ClientSession(
            headers={"User-Agent": USER_AGENT},
            # one long-lived watch per resource plus lists, on sockets that notice a dead peer
            connector=aiohttp.TCPConnector(limit=0, socket_factory=keepalive_socket),
        )

    @classmethod
    async def create(cls, kubeconfig: str | None = None, context: str | None = None, insecure: bool = False,
                     **options: Any) -> KubeClient:
        """Load credentials (see :meth:`Credentials.load`) and open the session."""
        creds = await asyncio.to_thread(Credentials.load, kubeconfig, context, insecure)
        return cls(creds, **options)

    async def close(self) -> None:
        await self._session.close()

    @property
    def host(self) -> str:
        return self.credentials.host

    async def _send(self, method: str, path: str, params: Mapping[str, str] | None, *, accept: str,
                    body: bytes | None, timeout: aiohttp.ClientTimeout) -> aiohttp.ClientResponse:
        """Send once, and once more after a 401 if reloading the credentials changed the token."""
        for attempt in (1, 2):
            try:
                headers = await self.credentials.headers()
            except CredentialsError as e:  # e.g. a kubeconfig caught mid-rewrite: retried later
                raise ApiError(0, "Credentials", str(e)) from None
            headers["Accept"] = accept
            if body is not None:
                headers["Content-Type"] = JSON
            try:
                resp = await self._session.request(
                    method, self.credentials.host + path, params=params, data=body, headers=headers, timeout=timeout,
                    ssl=self.credentials.ssl, server_hostname=self.credentials.server_hostname,
                    proxy=self.credentials.proxy,
                )
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                cause, connect = describe(e, self.credentials.host)
                if connect:
                    self.reachability.failed(cause)
                raise TransportError(cause, f"{method} {path}", connect) from None
            self.reachability.answered()
            if resp.status < 300:
                return resp
            try:
                payload = await resp.read()
            except (aiohttp.ClientError, OSError, TimeoutError):
                payload = b""
            finally:
                resp.release()
            if resp.status == 401 and attempt == 1 and await self._reload_credentials():
                log.info("kube_token_reloaded", path=path)
                continue
            raise error_from_status(resp.status, payload, _retry_after(resp.headers.get("Retry-After")))
        raise AssertionError("unreachable")

    async def _reload_credentials(self) -> bool:
        try:
            return await self.credentials.reload()
        except CredentialsError as e:
            log.warning("kube_credentials_reload_failed", error=str(e))
            return False

    async def get_json(self, path: str, params: Mapping[str, str] | None = None, *, accept: str = JSON,
                       decode: Callable[[bytes], Any] = orjson.loads) -> Any:
        """GET a JSON document; ``decode`` turns its body into objects (a typed LIST page decoder,
        exporter.kube.typed, or orjson)."""
        return await self._json("GET", path, params, accept, None, decode)

    async def post_json(self, path: str, body: Any) -> Any:
        return await self._json("POST", path, None, JSON, orjson.dumps(body))

    async def put_json(self, path: str, body: Any) -> Any:
        return await self._json("PUT", path, None, JSON, orjson.dumps(body))

    async def _json(self, method: str, path: str, params: Mapping[str, str] | None, accept: str,
                    body: bytes | None, decode: Callable[[bytes], Any] = orjson.loads) -> Any:
        """One request whose answer is a JSON document, decoded with ``decode``; errors typed."""
        timeout = aiohttp.ClientTimeout(total=self.request_timeout, sock_connect=self.connect_timeout)
        resp = await self._send(method, path, params, accept=accept, body=body, timeout=timeout)
        try:
            return decode(await resp.read())
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise TransportError(describe(e, self.credentials.host)[0], f"{method} {path}") from None
        except (orjson.JSONDecodeError, msgspec.DecodeError) as e:
            raise ApiError(resp.status, "BadResponse", f"{method} {path}: undecodable JSON: {e}") from None
        finally:
            resp.release()

    async def watch(self, path: str, params: Mapping[str, str] | None = None, *, accept: str = JSON) -> AsyncGenerator[dict[str, Any], None]:
        """Decoded watch events (``{"type", "object"}``), one per line of the chunked stream.

        Ends when the server ends the stream cleanly (its ``timeoutSeconds``); raises
        :class:`TransportError` if the stream is cut (a partial last line is discarded, never
        decoded), or if it stays silent longer than ``timeoutSeconds`` plus the read slack.
        """
        params = dict(params or {})
        params["watch"] = "true"
        silent = float(params.get("timeoutSeconds", "300")) + self.watch_read_slack
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout, sock_read=silent)
        resp = await self._send("GET", path, params, accept=accept, body=None, timeout=timeout)
        buf = bytearray()
        try:
            async for chunk in resp.content.iter_any():
                buf += chunk
                start = 0
                while (nl := buf.find(b"\n", start)) >= 0:
                    line = bytes(buf[start:nl])
                    start = nl + 1
                    if line.strip():
                        try:
                            event = orjson.loads(line)
                        except orjson.JSONDecodeError as e:
                            raise ApiError(200, "BadResponse", f"watch {path}: undecodable event: {e}") from None
                        yield event
                del buf[:start]
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise TransportError(describe(e, self.credentials.host)[0], f"watch {path}") from None
        finally:
            resp.close()  # also when the consumer stops early: never hand a half-read stream back to the pool
        if buf.strip():
            raise TransportError(f"the watch stream from {self.credentials.host} ended inside an event", f"watch {path}")


def report_failure(client: Any, logger: Any, event: str, source: str, error: ApiError, **fields: Any) -> None:
    """Log a source's failed request: at debug when the connection itself failed (the client's
    :class:`Reachability` has said so once, for every source), else as a warning, identical
    ones from the same source rate-limited with a count (:class:`exporter.logs.Repeats`)."""
    if isinstance(error, TransportError) and error.connect:
        logger.debug(event, error=str(error), request=error.what, **fields)
        return
    repeats = getattr(client, "repeats", None)
    if repeats is None:
        logger.warning(event, error=str(error), **fields)
        return
    repeats.log(logger, "warning", event, (source, str(error)), error=str(error), **fields)
