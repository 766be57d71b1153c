"""Authentication and authorisation of scrapers, the way kube-rbac-proxy and controller-runtime do it.

``/metrics`` names workloads and teams, so a cluster may require that only Prometheus reads it.
A scrape's bearer token is sent to the API server in a ``TokenReview``; the user it names is then
checked with a ``SubjectAccessReview`` for ``get`` on the non-resource URL ``/metrics``. Both
answers are cached briefly (keyed by a hash of the token, never the token itself) so a scrape
every 15 s costs two API calls a minute, not two per scrape. Health endpoints stay open.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from aiohttp import web

from .exposition import Family

log = structlog.get_logger(__name__)

PostJson = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

AUTH_REQUESTS = Family(
    "gangscope_metrics_auth_requests_total",
    "counter",
    "Scrapes checked by --metrics-auth, by result (allowed, unauthenticated, forbidden, error).",
    ("result",),
)

# Decisions remembered at most; past it the oldest go first, so a flood of made-up tokens
# (each costs one TokenReview) cannot grow memory without bound.
MAX_CACHED = 1024

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass
class MetricsAuth:
    """Decides whether a scrape may read ``/metrics``; ``post_json`` posts to the API server."""

    post_json: PostJson
    path: str = "/metrics"
    ttl: float = 60.0
    denied_ttl: float = 10.0
    counts: dict[str, int] = field(default_factory=lambda: {"allowed": 0, "unauthenticated": 0, "forbidden": 0, "error": 0})
    _cache: dict[str, tuple[float, str]] = field(default_factory=dict)
    _inflight: dict[str, asyncio.Future[str]] = field(default_factory=dict)
    on_change: Callable[[], None] | None = None

    async def check(self, authorization: str) -> str:
        """``allowed``, ``unauthenticated``, ``forbidden`` or ``error`` for an Authorization header."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return "unauthenticated"
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached and cached[0] > now:
            return cached[1]
        # Concurrent scrapes with the same new token share one review instead of each sending
        # their own: a burst of them (many targets of one scraper behind a Service, a restart)
        # costs one TokenReview and one SubjectAccessReview.
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        result = "error"  # what the waiters get if this scrape is cancelled mid-review
        try:
            result = await self._decide(key, token)
            return result
        finally:
            del self._inflight[key]
            future.set_result(result)

    async def _decide(self, key: str, token: str) -> str:
        try:
            result = await self._review(token)
        except Exception as exc:  # the API server is down: refuse, do not cache, say why without the token
            log.warning("metrics_auth_error", error=type(exc).__name__, status=getattr(exc, "status", None))
            return "error"
        now = time.monotonic()
        self._cache[key] = (now + (self.ttl if result == "allowed" else self.denied_ttl), result)
        if len(self._cache) > MAX_CACHED:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            while len(self._cache) > MAX_CACHED:
                del self._cache[next(iter(self._cache))]
        return result

    async def _review(self, token: str) -> str:
        review = await self.post_json(
            TOKEN_REVIEW_PATH,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return "unauthenticated"
        user = status.get("user") or {}
        sar = await self.post_json(
            ACCESS_REVIEW_PATH,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user.get("username", ""),
                    "uid": user.get("uid", ""),
                    "groups": user.get("groups") or [],
                    "extra": user.get("extra") or {},
                    "nonResourceAttributes": {"path": self.path, "verb": "get"},
                },
            },
        )
        allowed = bool((sar.get("status") or {}).get("allowed"))
        if not allowed:
            log.info("metrics_auth_forbidden", user=user.get("username", ""))
        return "allowed" if allowed else "forbidden"

    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        result = await self.check(request.headers.get("Authorization", ""))
        self.counts[result] += 1
        if self.on_change:
            self.on_change()
        if result == "allowed":
            return await handler(request)
        if result == "unauthenticated":
            return web.Response(status=401, text="Unauthorized\n", headers={"WWW-Authenticate": 'Bearer realm="gangscope"'})
        if result == "forbidden":
            return web.Response(status=403, text="Forbidden\n")
        return web.Response(status=503, text="authorization check failed\n")

    def lines(self) -> list[str]:
        return [AUTH_REQUESTS.sample([("result", k)], v) for k, v in sorted(self.counts.items())]
