"""Where to reach the API server and how to authenticate: the in-cluster service account read
directly, kubeconfig through the ``kubernetes`` package's loader.

In a pod (the agent on every GPU node, the collector) the service account is three facts: the
token file, the CA file and ``KUBERNETES_SERVICE_HOST``/``PORT``. Reading them ourselves keeps
the ``kubernetes`` package (about 20 MiB of resident modules: the generated models, urllib3,
requests, oauthlib, yaml) out of the process, which matters on a DaemonSet that runs on every
node. A kubeconfig is another matter (contexts, client certificates, exec plugins, auth
providers): there the package's loader is imported, lazily, and we take host, TLS material and
the bearer token from the ``Configuration`` it fills, so every auth method the official client
supports works without reimplementing any of it.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..logs import redact

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_TOKEN = f"{SA_DIR}/token"
SA_CA = f"{SA_DIR}/ca.crt"
# How often the loader's refresh hook (which may run an exec plugin) is consulted at most.
REFRESH_HOOK_PERIOD = 10.0


class CredentialsError(Exception):
    """No usable credentials: neither in-cluster nor a readable kubeconfig."""


@dataclass
class ApiConfig:
    """What a loader found: the server, TLS material, the Authorization header value."""

    host: str
    auth: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True
    server_name: str | None = None
    proxy: str | None = None
    # Renews a short-lived token (exec plugins) and returns the header value; None when static.
    refresh: Callable[[], str | None] | None = field(default=None, repr=False)


def _load_kubeconfig(path: str | None, context: str | None) -> ApiConfig:
    # Checked before importing the package, so an agent without Kubernetes access stays small.
    if path and not any(os.path.exists(p) for p in path.split(os.pathsep) if p):
        raise FileNotFoundError(f"no kubeconfig at {path}")
    from kubernetes.client import Configuration
    from kubernetes.config import kube_config

    cfg = Configuration()
    kube_config.load_kube_config(config_file=path, context=context, client_configuration=cfg, persist_config=False)

    def refresh() -> str | None:
        if cfg.refresh_api_key_hook is not None:
            cfg.refresh_api_key_hook(cfg)
        return _auth_header(cfg.api_key, cfg.api_key_prefix)

    return ApiConfig(
        host=cfg.host, auth=_auth_header(cfg.api_key, cfg.api_key_prefix), ca_file=cfg.ssl_ca_cert,
        cert_file=cfg.cert_file, key_file=cfg.key_file, verify=bool(cfg.verify_ssl),
        server_name=getattr(cfg, "tls_server_name", None) or None, proxy=cfg.proxy or None,
        refresh=refresh if cfg.refresh_api_key_hook is not None else None,
    )


def _load_incluster(token_file: str, ca_file: str, environ: Mapping[str, str]) -> ApiConfig:
    """The pod's service account, by the rules of client-go's ``InClusterConfig``."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ValueError("KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set")
    if ":" in host:  # an IPv6 service address
        host = f"[{host}]"
    with open(token_file, encoding="utf-8") as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"service-account token file {token_file} is empty")
    if not os.path.isfile(ca_file):
        raise FileNotFoundError(f"service-account CA file {ca_file} does not exist")
    return ApiConfig(host=f"https://{host}:{port}", auth=f"Bearer {token}", ca_file=ca_file)


def _auth_header(api_key: Mapping[str, Any], api_key_prefix: Mapping[str, Any]) -> str | None:
    """The Authorization header value a kubeconfig loader set (the key name changed across versions)."""
    for key in ("BearerToken", "authorization"):
        value = api_key.get(key)
        if value:
            prefix = api_key_prefix.get(key)
            value = f"{prefix} {value}" if prefix else value
            # Loaders write "bearer <token>" as well; normalise the scheme's case.
            scheme, _, token = value.partition(" ")
            return f"Bearer {token.strip()}" if scheme.lower() == "bearer" else value
    return None


@dataclass
class Credentials:
    """Host, TLS context and current Authorization header for one API server."""

    description: str  # "kubeconfig /path (context x)" or "in-cluster": safe to log
    loader: Callable[[], ApiConfig]
    insecure: bool = False
    token_file: str | None = None  # in-cluster: watched for rotation
    host: str = ""
    ssl: ssl.SSLContext | bool = True
    server_hostname: str | None = None
    proxy: str | None = None
    _cfg: ApiConfig = field(default_factory=lambda: ApiConfig(""), repr=False)
    _auth: str | None = field(default=None, repr=False)
    _token_mtime: float = 0.0
    _hook_checked: float = 0.0

    @classmethod
    def load(cls, kubeconfig: str | None = None, context: str | None = None, insecure: bool = False, *,
             token_file: str | None = None, ca_file: str | None = None,
             environ: Mapping[str, str] = os.environ) -> Credentials:
        """``--kubeconfig`` if given, else the in-cluster service account when running in a pod,
        else ``$KUBECONFIG`` (colon-separated files are merged), else ``~/.kube/config``.

        ``token_file``/``ca_file`` default to the service-account files (:data:`SA_TOKEN`,
        :data:`SA_CA`, read when called)."""
        token_file = token_file or SA_TOKEN
        ca_file = ca_file or SA_CA
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

    def _run_loader(self) -> ApiConfig:
        try:
            return self.loader()
        except Exception as e:  # ConfigException, OSError, YAML errors, a failing exec plugin...
            # The loader's messages name files and keys; redact in case one quotes a header.
            raise CredentialsError(redact(f"cannot load credentials from {self.description}: {type(e).__name__} {e}")) from None

    def _apply(self, cfg: ApiConfig) -> None:
        self._cfg = cfg
        self.host = cfg.host.rstrip("/")
        self._auth = cfg.auth
        self.server_hostname = cfg.server_name
        self.proxy = cfg.proxy
        if self.token_file:
            self._token_mtime = _mtime(self.token_file)
        if not self.host.startswith("https"):
            self.ssl = True  # unused for http://
            return
        verify = cfg.verify and not self.insecure
        ctx = ssl.create_default_context(cafile=cfg.ca_file) if verify else ssl.create_default_context()
        if not verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            try:
                ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
            except (OSError, ssl.SSLError) as e:  # a bad or unreadable client key: name the file, never its content
                raise CredentialsError(f"cannot load the client certificate of {self.description}: {type(e).__name__}") from None
        self.ssl = ctx

    async def reload(self) -> bool:
        """Re-run the loader (after a 401, or a rotated token file); True when the Authorization header changed."""
        before = self._auth
        cfg = await asyncio.to_thread(self._run_loader)
        self._apply(cfg)
        return self._auth != before

    async def headers(self) -> dict[str, str]:
        """Request headers with the current token, refreshed first if it rotated or expired."""
        if self.token_file and _mtime(self.token_file) != self._token_mtime:
            await self.reload()
        elif self._cfg.refresh is not None and time.monotonic() - self._hook_checked > REFRESH_HOOK_PERIOD:
            self._hook_checked = time.monotonic()
            self._auth = await asyncio.to_thread(self._cfg.refresh)
        return {"Authorization": self._auth} if self._auth else {}


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime_ns / 1e9
    except OSError:
        return 0.0
