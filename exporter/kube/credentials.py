"""Where to reach the API server and how to authenticate, via the ``kubernetes`` package's loaders.

The package's own loaders read kubeconfig (contexts, client certificates, CA, exec plugins,
auth providers) and the in-cluster service account; we take host, TLS material and the bearer
token from the ``Configuration`` they fill and use them with aiohttp, so every auth method the
official client supports works here without reimplementing any of it.

Tokens change: a projected service-account token is rotated on disk (about hourly), exec
plugins hand out short-lived tokens, a kubeconfig may be rewritten. :meth:`Credentials.headers`
re-reads a rotated in-cluster token file (its mtime changed) and lets the loader's refresh hook
renew expired exec tokens; :meth:`Credentials.reload` re-runs the loader from scratch, which the
client does after a 401.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes.client import Configuration
from kubernetes.config import incluster_config, kube_config

from ..logs import redact

SA_TOKEN = incluster_config.SERVICE_TOKEN_FILENAME
SA_CA = incluster_config.SERVICE_CERT_FILENAME
# How often the loader's refresh hook (which may run an exec plugin) is consulted at most.
REFRESH_HOOK_PERIOD = 10.0


class CredentialsError(Exception):
    """No usable credentials: neither in-cluster nor a readable kubeconfig."""


def _load_kubeconfig(path: str | None, context: str | None) -> Configuration:
    cfg = Configuration()
    kube_config.load_kube_config(config_file=path, context=context, client_configuration=cfg, persist_config=False)
    return cfg


def _load_incluster(token_file: str, ca_file: str, environ: dict[str, str] | os._Environ[str]) -> Configuration:
    cfg = Configuration()
    incluster_config.InClusterConfigLoader(token_file, ca_file, try_refresh_token=True, environ=environ).load_and_set(cfg)
    return cfg


def _auth_header(cfg: Configuration) -> str | None:
    """The Authorization header value the loader set (the key name changed across versions)."""
    for key in ("BearerToken", "authorization"):
        value = cfg.api_key.get(key)
        if value:
            prefix = cfg.api_key_prefix.get(key)
            value = f"{prefix} {value}" if prefix else value
            # The in-cluster loader writes "bearer <token>"; normalise the scheme's case.
            scheme, _, token = value.partition(" ")
            return f"Bearer {token.strip()}" if scheme.lower() == "bearer" else value
    return None


@dataclass
class Credentials:
    """Host, TLS context and current Authorization header for one API server."""

    description: str  # "kubeconfig /path (context x)" or "in-cluster": safe to log
    loader: Callable[[], Configuration]
    insecure: bool = False
    token_file: str | None = None  # in-cluster: watched for rotation
    host: str = ""
    ssl: ssl.SSLContext | bool = True
    server_hostname: str | None = None
    proxy: str | None = None
    _cfg: Configuration = field(default_factory=Configuration, repr=False)
    _auth: str | None = field(default=None, repr=False)
    _token_mtime: float = 0.0
    _hook_checked: float = 0.0

    @classmethod
    def load(cls, kubeconfig: str | None = None, context: str | None = None, insecure: bool = False, *,
             token_file: str = SA_TOKEN, ca_file: str = SA_CA,
             environ: dict[str, str] | os._Environ[str] = os.environ) -> Credentials:
        """``--kubeconfig`` if given, else the in-cluster service account when running in a pod,
        else ``$KUBECONFIG`` (colon-separated files are merged), else ``~/.kube/config``."""
        if kubeconfig:
            creds = cls(f"kubeconfig {kubeconfig}", lambda: _load_kubeconfig(kubeconfig, context), insecure)
        elif environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(token_file):
            creds = cls("in-cluster", lambda: _load_incluster(token_file, ca_file, environ), insecure, token_file)
        else:
            path = environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
            creds = cls(f"kubeconfig {path}", lambda: _load_kubeconfig(path, context), insecure)
        if context:
            creds.description += f" (context {context})"
        creds._apply(creds._run_loader())
        return creds

    def _run_loader(self) -> Configuration:
        try:
            return self.loader()
        except Exception as e:  # ConfigException, OSError, YAML errors, a failing exec plugin...
            # The loader's messages name files and keys; redact in case one quotes a header.
            raise CredentialsError(redact(f"cannot load credentials from {self.description}: {type(e).__name__} {e}")) from None

    def _apply(self, cfg: Configuration) -> None:
        self._cfg = cfg
        self.host = cfg.host.rstrip("/")
        self._auth = _auth_header(cfg)
        self.server_hostname = getattr(cfg, "tls_server_name", None) or None
        self.proxy = cfg.proxy or None
        if self.token_file:
            self._token_mtime = _mtime(self.token_file)
        if not self.host.startswith("https"):
            self.ssl = True  # unused for http://
            return
        verify = cfg.verify_ssl and not self.insecure
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if verify else ssl.create_default_context()
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
        self.ssl = ctx

    async def reload(self) -> bool:
        """Re-run the loader (after a 401); True when the Authorization header changed."""
        before = self._auth
        cfg = await asyncio.to_thread(self._run_loader)
        self._apply(cfg)
        return self._auth != before

    async def headers(self) -> dict[str, str]:
        """Request headers with the current token, refreshed first if it rotated or expired."""
        if self.token_file and _mtime(self.token_file) != self._token_mtime:
            await self.reload()
        elif self._cfg.refresh_api_key_hook is not None and time.monotonic() - self._hook_checked > REFRESH_HOOK_PERIOD:
            self._hook_checked = time.monotonic()
            await asyncio.to_thread(self._cfg.refresh_api_key_hook, self._cfg)
            self._auth = _auth_header(self._cfg)
        return {"Authorization": self._auth} if self._auth else {}


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime_ns / 1e9
    except OSError:
        return 0.0
