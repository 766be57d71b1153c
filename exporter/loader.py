"""Objects from ``kubectl get ... -o yaml|json`` dumps: the offline source of snapshot and explain.

Accepts a file or a folder (``*.yaml``, ``*.yml``, ``*.json``, recursively, in name order); a file
may hold a ``List`` (or a typed ``WorkloadList``), one object, or many YAML documents. YAML files
are split into documents before parsing, so one malformed document is reported (file, index,
name when readable) and skipped while the others load. :func:`feed` then hands the objects to
the collector's handlers as watch events, in dependency order.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from .exposition import Exposition
from .health import SourceHealth
from .kube.resources import COLLECTOR_RESOURCES, POD_RESOURCES

try:  # the C loader is ~10x faster on large dumps
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - PyYAML without libyaml
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

SUFFIXES = (".yaml", ".yml", ".json")
# Sources whose records others depend on are fed first (pods last: the gangs and jobs they count
# are then known). Any order gives the same result (every record re-evaluates what depends on it
# when it arrives, as live; tests/test_feed_order.py); this one asks each judgement once.
FEED_ORDER = ("topologies", "resourceflavors", "nodes", "clusterqueues", "cohorts", "localqueues", "workloads")
FEED_LAST = ("pods",)
# A dump's Pods go to the one pod handler of dumps (the collector's pod watches are selections of
# the same objects; a dump is whatever kubectl printed).
DUMP_SOURCES = {("", "Pod"): "pods"}
_DOC_SPLIT = re.compile(r"^---[ \t]*(?:#.*)?$", re.M)


@dataclass
class Loaded:
    """Objects in dump order, each with where it came from, and the problems met on the way."""

    objects: list[tuple[str, dict]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def load_reporting(path: Path, prog: str, quiet: bool = False) -> Loaded | None:
    """:func:`load_path` for a command: problems go to stderr prefixed with ``prog`` (unless
    ``quiet``: the caller reports ``problems`` itself); None when ``path`` does not exist (the
    caller exits 1)."""
    try:
        loaded = load_path(path)
    except FileNotFoundError:
        print(f"{prog}: {path}: no such file or directory", file=sys.stderr)
        return None
    for problem in [] if quiet else loaded.problems:
        print(f"{prog}: {problem}", file=sys.stderr)
    return loaded


def group_of(api_version: str) -> str:
    """``kueue.x-k8s.io/v1beta2`` -> ``kueue.x-k8s.io``; ``v1`` (core) -> ``""``."""
    return api_version.rpartition("/")[0]


def load_path(path: Path) -> Loaded:
    """Load every object under ``path``; raises ``FileNotFoundError`` when it does not exist."""
    out = Loaded()
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    elif path.exists():
        files = [path]
    else:
        raise FileNotFoundError(str(path))
    for f in files:
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            out.problems.append(f"{f}: unreadable: {exc}")
            continue
        for origin, doc in _documents(f, text, out.problems):
            _flatten(origin, doc, out)
    return out


def _documents(f: Path, text: str, problems: list[str]) -> Iterator[tuple[str, Any]]:
    stripped = text.lstrip()
    if f.suffix.lower() == ".json" or stripped.startswith(("{", "[")):
        try:
            yield f"{f}", orjson.loads(text)
            return
        except orjson.JSONDecodeError as exc:
            if f.suffix.lower() == ".json":
                problems.append(f"{f}: malformed JSON, skipped: {exc}")
                return
    index = -1
    for chunk in _DOC_SPLIT.split(text):
        if not chunk.strip():
            continue
        index += 1  # documents counted from 0, empty ones not counted
        try:
            doc = yaml.load(chunk, Loader=_Loader)  # noqa: S506 - the safe C loader
        except yaml.YAMLError as exc:
            name = re.search(r"^\s+name:\s*(\S+)", chunk, re.M)
            problems.append(f"{f}: document {index}{f' (name {name.group(1)})' if name else ''}: malformed YAML, "
                            f"skipped: {str(exc).splitlines()[0]}")
            continue
        if doc is not None:
            yield f"{f}#{index}", doc


def _flatten(origin: str, doc: Any, out: Loaded) -> None:
    if isinstance(doc, list):  # a bare JSON array of objects
        for i, item in enumerate(doc):
            _flatten(f"{origin}[{i}]", item, out)
        return
    if not isinstance(doc, dict):
        out.problems.append(f"{origin}: not an object ({type(doc).__name__}), skipped")
        return
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        item_kind = kind[: -len("List")]  # typed lists (WorkloadList) omit kind on their items
        api_version = doc.get("apiVersion") if item_kind else None
        for i, item in enumerate(doc["items"]):
            if isinstance(item, dict):
                if item_kind and "kind" not in item:
                    item = {**item, "kind": item_kind}
                if api_version and "apiVersion" not in item:
                    item = {**item, "apiVersion": api_version}
            _flatten(f"{origin}.items[{i}]", item, out)
        return
    if not isinstance(kind, str) or not isinstance(doc.get("apiVersion"), str):
        out.problems.append(f"{origin}{_name(doc)}: no kind/apiVersion, skipped")
        return
    out.objects.append((origin, doc))


def _name(doc: dict) -> str:
    meta = doc.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        return f" (name {meta['name']})"
    return ""


@dataclass
class Fed:
    """What :func:`feed` could not use: objects by ignored kind, and objects that did not parse."""

    ignored: dict[str, int]
    parse_errors: int


def feed(exposition: Exposition, handlers: dict[str, Any], objects: list[tuple[str, dict]], prog: str,
         quiet: bool = False) -> Fed:
    """Apply dump objects to the collector's handlers as watch events, :data:`FEED_ORDER` first.

    An object that appears twice (two snapshots of one Workload) is applied as a MODIFIED event,
    so a transition between the snapshots, such as an eviction, is counted as the collector
    would count it. Kinds the collector does not read are reported on stderr, prefixed ``prog``
    (unless ``quiet``; they are in the result either way).
    """
    by_type = {(r.group, r.kind): r.source for r in COLLECTOR_RESOURCES if r not in POD_RESOURCES}
    by_type.update(DUMP_SOURCES)
    per_source: dict[str, list[dict]] = {}
    skipped: dict[str, int] = {}
    for _, obj in objects:
        source = by_type.get((group_of(obj["apiVersion"]), obj["kind"]))
        if source is None or source not in handlers:
            skipped[obj["kind"]] = skipped.get(obj["kind"], 0) + 1
            continue
        per_source.setdefault(source, []).append(obj)
    for kind, n in [] if quiet else sorted(skipped.items()):
        print(f"{prog}: {n} object(s) of kind {kind} ignored (not read by the collector)", file=sys.stderr)
    parse_errors = 0
    rank = {s: i for i, s in enumerate(FEED_ORDER)} | {s: len(FEED_ORDER) + 1 for s in FEED_LAST}
    for source in sorted(per_source, key=lambda s: (rank.get(s, len(FEED_ORDER)), s)):
        handler = handlers[source]
        health = SourceHealth(source, exposition)
        handler.health = health
        seen: set = set()
        for obj in per_source[source]:
            meta = obj.get("metadata")
            key = (str(meta.get("namespace")), str(meta.get("name"))) if isinstance(meta, dict) else None
            if source not in FEED_LAST:
                handler.apply("MODIFIED" if key in seen else "ADDED", obj)
            seen.add(key)
        if source in FEED_LAST:
            # A dump's pods are one complete LIST: announced once, and listed at its end, so no
            # gang is judged on part of its pods (a gang seen "empty" before its first pod would
            # restart its stuck window at load time).
            handler.replace(per_source[source])
        health.sync_ok(objects=len(seen))
        parse_errors += health.parse_errors
    return Fed(skipped, parse_errors)
