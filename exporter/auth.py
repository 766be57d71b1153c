"""Authentication and authorisation of every data route, the way kube-rbac-proxy and controller-runtime do it.

``/metrics`` names workloads and teams, and ``/debug/explain`` quotes Kueue's messages, node
names, queues and owners, so a cluster may require that only those allowed read them. With
``--metrics-auth`` every route except the open ones (``/``, ``/healthz``, ``/readyz``) goes
through one guard: the request's bearer token is sent to the API server in a ``TokenReview``,
and the user it names is checked with a ``SubjectAccessReview`` for ``get`` on the request's
path as a non-resource URL: kube-rbac-proxy's default attributes (brancz/kube-rbac-proxy
pkg/proxy/proxy.go, ``GetRequestAttributes``: no resource attributes configured -> verb from the
method, ``GET`` -> ``get``, ``Path: r.URL.Path``, ``ResourceRequest: false``). A handler may ask
for more (:meth:`Guard.authorize`): ``/debug/explain`` also needs ``get`` on Workloads in the
namespace it is asked about, because it reveals that namespace's objects; kube-rbac-proxy does the
same with resource attributes templated from a query parameter (``Rewrites.ByQueryParameter``).

Answers are cached briefly, keyed by a hash of the token (never the token itself): the user a
token names, and each decision for that token and those attributes. A scrape every 15 s costs
two API calls a minute, not two per scrape, and concurrent requests that need the same review
share one. A request for a path no route serves is authenticated but not authorised (no review
of arbitrary paths a client makes up), then answered 404.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from aiohttp import web

from .exposition import Family

log = structlog.get_logger(__name__)

PostJson = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")

AUTH_REQUESTS = Family(
    "gangscope_metrics_auth_requests_total",
    "counter",
    "Checks made by --metrics-auth (one per request to a guarded route, one more for the namespace of a "
    "/debug/explain request), by result (allowed, unauthenticated, forbidden, error).",
    ("result",),
)

# Routes that stay open: probes need no token, and the landing page shows no object.
OPEN_PATHS = frozenset({"/", "/healthz", "/readyz"})

# Entries remembered at most per cache; past it the oldest go first, so a flood of made-up
# tokens (each costs one TokenReview) cannot grow memory without bound.
MAX_CACHED = 1024

TOKEN_REVIEW_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class Attributes:
    """What a SubjectAccessReview asks: a non-resource URL (``path``) or a resource."""

    verb: str = "get"
    path: str = ""
    group: str = ""
    resource: str = ""
    namespace: str = ""

    def spec(self) -> dict[str, Any]:
        if self.path:
            return {"nonResourceAttributes": {"path": self.path, "verb": self.verb}}
        return {"resourceAttributes": {"verb": self.verb, "group": self.group, "resource": self.resource,
                                       "namespace": self.namespace}}


@dataclass(frozen=True)
class User:
    """The identity a TokenReview returned, as a SubjectAccessReview wants it back."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


UNAUTHENTICATED = User("")


@dataclass(frozen=True)
class Caller:
    key: str  # SHA-256 of the token
    user: User


CALLER = web.RequestKey("caller", Caller)  # the authenticated caller of a guarded request


@dataclass
class Guard:
    """Decides whether a request may read a guarded route; ``post_json`` posts to the API server."""

    post_json: PostJson
    ttl: float = 60.0
    denied_ttl: float = 10.0
    counts: dict[str, int] = field(default_factory=lambda: {"allowed": 0, "unauthenticated": 0, "forbidden": 0, "error": 0})
    on_change: Callable[[], None] | None = None
    _users: dict[str, tuple[float, User]] = field(default_factory=dict)
    _decisions: dict[tuple[str, Attributes], tuple[float, bool]] = field(default_factory=dict)
    _inflight: dict[Any, asyncio.Future[Any]] = field(default_factory=dict)

    # ---- the checks -------------------------------------------------------------------------

    async def authenticate(self, authorization: str) -> Caller | str:
        """The caller behind an Authorization header, or ``unauthenticated`` / ``error``."""
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return "unauthenticated"
        key = hashlib.sha256(token.encode()).hexdigest()
        user = await self._once(self._users, ("user", key), lambda: self._token_review(token),
                                lambda u: self.denied_ttl if u is UNAUTHENTICATED else self.ttl)
        if user is None:
            return "error"
        return "unauthenticated" if user is UNAUTHENTICATED else Caller(key, user)

    async def decide(self, caller: Caller, attributes: Attributes) -> str:
        """``allowed``, ``forbidden`` or ``error`` for the caller and these attributes."""
        allowed = await self._once(self._decisions, (caller.key, attributes),
                                   lambda: self._access_review(caller.user, attributes),
                                   lambda ok: self.ttl if ok else self.denied_ttl)
        if allowed is None:
            return "error"
        return "allowed" if allowed else "forbidden"

    async def check(self, authorization: str, attributes: Attributes) -> str:
        """Both steps for one request: ``allowed``, ``unauthenticated``, ``forbidden`` or ``error``."""
        caller = await self.authenticate(authorization)
        if isinstance(caller, str):
            return caller
        return await self.decide(caller, attributes)

    async def _once(self, cache: dict[Any, tuple[float, T]], key: Any, review: Callable[[], Awaitable[T | None]],
                    ttl: Callable[[T], float]) -> T | None:
        """A cached answer, else one review shared by every concurrent request that needs it
        (a burst of scrapes with a new token costs one). None when the API server failed: not cached."""
        hit = cache.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[T | None] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        value: T | None = None  # what the waiters get if this request is cancelled mid-review
        try:
            value = await review()
            if value is not None:
                now = time.monotonic()
                cache[key] = (now + ttl(value), value)
                if len(cache) > MAX_CACHED:
                    for k in [k for k, v in cache.items() if v[0] <= now]:
                        del cache[k]
                    while len(cache) > MAX_CACHED:
                        del cache[next(iter(cache))]
            return value
        finally:
            del self._inflight[key]
            future.set_result(value)

    async def _token_review(self, token: str) -> User | None:
        try:
            review = await self.post_json(
                TOKEN_REVIEW_PATH,
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
            )
        except Exception as exc:  # the API server is down: refuse, say why without the token
            log.warning("metrics_auth_error", review="TokenReview", error=type(exc).__name__, status=getattr(exc, "status", None))
            return None
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return UNAUTHENTICATED
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        return User(str(user.get("username", "")), str(user.get("uid", "")), tuple(user.get("groups") or ()),
                    tuple(sorted((str(k), tuple(v)) for k, v in extra.items() if isinstance(v, list))))

    async def _access_review(self, user: User, attributes: Attributes) -> bool | None:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user.username, "uid": user.uid, "groups": list(user.groups),
                     "extra": {k: list(v) for k, v in user.extra}, **attributes.spec()},
        }
        try:
            sar = await self.post_json(ACCESS_REVIEW_PATH, body)
        except Exception as exc:
            log.warning("metrics_auth_error", review="SubjectAccessReview", error=type(exc).__name__,
                        status=getattr(exc, "status", None))
            return None
        allowed = bool((sar.get("status") or {}).get("allowed"))
        if not allowed:
            log.info("metrics_auth_forbidden", user=user.username, **attributes.spec())
        return allowed

    # ---- HTTP -------------------------------------------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every route but :data:`OPEN_PATHS`: the token must name a user allowed to ``get`` the path."""
        if request.path in OPEN_PATHS:
            return await handler(request)
        caller = await self.authenticate(request.headers.get("Authorization", ""))
        if isinstance(caller, str):
            return self._refuse(caller)
        if request.match_info.http_exception is not None:  # no such route: nothing to authorise
            return await handler(request)
        result = await self.decide(caller, Attributes("get", path=request.path))
        if result != "allowed":
            return self._refuse(result)
        self._count(result)
        request[CALLER] = caller
        return await handler(request)

    async def authorize(self, request: web.Request, attributes: Attributes) -> web.Response | None:
        """A further check inside a guarded handler: None when allowed, else the response to send."""
        result = await self.decide(request[CALLER], attributes)
        if result == "allowed":
            self._count(result)
            return None
        return self._refuse(result)

    def _refuse(self, result: str) -> web.Response:
        self._count(result)
        if result == "unauthenticated":
            return web.Response(status=401, text="Unauthorized\n", headers={"WWW-Authenticate": 'Bearer realm="gangscope"'})
        if result == "forbidden":
            return web.Response(status=403, text="Forbidden\n")
        return web.Response(status=503, text="authorization check failed\n")

    def _count(self, result: str) -> None:
        self.counts[result] += 1
        if self.on_change:
            self.on_change()

    def lines(self) -> list[str]:
        return [AUTH_REQUESTS.sample((k,), v) for k, v in sorted(self.counts.items())]


GUARD = web.AppKey("guard", Guard)


async def authorize(request: web.Request, attributes: Attributes) -> web.Response | None:
    """For a handler: None when the app has no guard or the caller is allowed ``attributes``,
    else the 403/503 response to return."""
    guard = request.app.get(GUARD)
    if guard is None:
        return None
    return await guard.authorize(request, attributes)
