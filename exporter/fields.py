"""Tolerant field access for decoded Kubernetes objects.

Objects arrive as plain dicts from orjson or YAML. The API server validates them, but a dump
edited by hand, a newer Kueue or a broken conversion webhook can still put a number where a
string belongs. Every accessor here returns a usable default and notes the problem in a
``Problems`` list instead of raising, so one odd field costs one parse error, not the object
(and never the process). Timestamps and resource quantities are parsed here too.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

Problems = list[str]

_EMPTY: dict = {}


class ParseError(ValueError):
    """The object cannot be used at all (no name, not an object): it is skipped and counted."""


def named_metadata(obj: Any) -> dict:
    """An object's ``metadata``, which must at least hold a name; else the object is unusable."""
    if not isinstance(obj, dict):
        raise ParseError("not an object")
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ParseError("object has no metadata.name")
    return meta


def require_identity(kind: str, meta: dict) -> tuple[str, str]:
    """(name, namespace) of a namespaced object; a :class:`ParseError` naming exactly what is
    missing ("Workload trainjob-x without metadata.namespace"), so that a user can find it."""
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not name:
        if isinstance(namespace, str) and namespace:
            raise ParseError(f"{kind} in namespace {namespace} without metadata.name")
        raise ParseError(f"{kind} without metadata.name and metadata.namespace")
    if not isinstance(namespace, str) or not namespace:
        raise ParseError(f"{kind} {name} without metadata.namespace")
    return name, namespace


def as_dict(value: Any, what: str, problems: Problems) -> dict:
    if isinstance(value, dict):
        return value
    if value is not None:
        problems.append(f"{what}: expected an object, got {type(value).__name__}")
    return _EMPTY


def as_list(value: Any, what: str, problems: Problems) -> list:
    if isinstance(value, list):
        return value
    if value is not None:
        problems.append(f"{what}: expected a list, got {type(value).__name__}")
    return []


def as_str(value: Any, what: str, problems: Problems, default: str = "") -> str:
    if isinstance(value, str):
        return value
    if value is not None:
        problems.append(f"{what}: expected a string, got {type(value).__name__}")
    return default


def as_int(value: Any, what: str, problems: Problems, default: int | None = None) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if value is not None:
        problems.append(f"{what}: expected an integer, got {type(value).__name__}")
    return default


def as_bool(value: Any, what: str, problems: Problems, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if value is not None:
        problems.append(f"{what}: expected a boolean, got {type(value).__name__}")
    return default


def str_map(value: Any, what: str, problems: Problems) -> dict[str, str]:
    """A ``map[string]string`` (labels, annotations, flavors); non-string entries are dropped."""
    d = as_dict(value, what, problems)
    for k, v in d.items():
        if not isinstance(v, str) or not isinstance(k, str):
            problems.append(f"{what}: non-string entry {k!r}")
            return {k2: v2 for k2, v2 in d.items() if isinstance(k2, str) and isinstance(v2, str)}
    return d


_NO_ENTRIES: dict[str, str] = {}  # every empty map of interned_map, read-only


def interned_map(d: dict[str, str]) -> dict[str, str]:
    """A string map (labels) with its keys and values interned: records keep labels whose keys
    repeat on every object and whose values repeat what other records hold (a Workload's job uid
    is its owner's uid, a PodGroup's ``app`` label its name, a node's labels its neighbours')."""
    return {sys.intern(k): sys.intern(v) for k, v in d.items()} if d else _NO_ENTRIES


SHARED_LIMIT = 65536  # entries a cache of shared values keeps before it starts over


def shared(cache: dict[Any, Any], key: Any, value: Any) -> Any:
    """The value ``cache`` holds for ``key``, or ``value``, which it keeps from now on: records
    share the immutable pieces that repeat across objects (a cluster's handful of distinct label
    maps, taints, tolerations) instead of holding a copy each. The cache starts over past
    :data:`SHARED_LIMIT`, so churn cannot grow it forever."""
    found = cache.get(key)
    if found is None:
        if len(cache) >= SHARED_LIMIT:
            cache.clear()
        found = cache[key] = value
    return found


_TIME_CACHE: dict[str, float | None] = {}


def parse_time(value: str) -> float | None:
    """RFC 3339 (``2026-08-20T10:05:12Z``) to Unix seconds; ``None`` when unparseable.

    Cached: a cluster's conditions share few distinct timestamps, and this runs on every event.
    """
    try:
        return _TIME_CACHE[value]
    except KeyError:
        pass
    try:
        dt = datetime.fromisoformat(value)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=timezone.utc)
        seconds: float | None = dt.timestamp()
    except ValueError:
        seconds = None
    if len(_TIME_CACHE) > 65536:
        _TIME_CACHE.clear()
    _TIME_CACHE[value] = seconds
    return seconds


_SUFFIXES = {
    "": Decimal(1), "m": Decimal("0.001"), "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12, "P": Decimal(10) ** 15, "E": Decimal(10) ** 18, "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40, "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def parse_quantity(value: Any) -> float:
    """A Kubernetes resource quantity (``"8"``, ``8``, ``"1k"``, ``"500m"``) as a number.

    Raises ``ValueError`` on anything else; GPU counts are almost always small integers, which
    take the fast path.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, (int, float)):
        return value
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    if value.isdigit():
        return int(value)
    s = value.strip()
    num = s.rstrip("kKMGTPEim")
    suffix = s[len(num):]
    if suffix not in _SUFFIXES:
        # exponent form such as 1e3
        num, suffix = s, ""
    try:
        result = Decimal(num) * _SUFFIXES[suffix]
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc
    if not result.is_finite():
        raise ValueError(f"not a quantity: {value!r}")
    return int(result) if result == result.to_integral_value() else float(result)
