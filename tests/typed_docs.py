"""Helpers of the typed-document tests (tests/test_workload_doc.py, tests/test_node_doc.py)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import orjson
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shared_folder
from exporter.kube.typed import Unclean, page_decoder

SHARED_REAL = shared_folder.present("fixtures", "real")  # more real objects where ../shared is beside the checkout


def _json_ready(value: Any) -> Any:
    """A YAML document as the API server's JSON prints it (PyYAML reads unquoted times as datetimes)."""
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    return value


def real_objects(files: list[Path], keep: Callable[[dict[str, Any]], bool]) -> list[tuple[str, dict[str, Any]]]:
    """Every object ``keep`` takes in ``files`` (YAML streams or JSON, Lists unpacked), named
    ``file#index``, with the shared real fixtures' files after them where they are present."""
    if SHARED_REAL is not None:
        files = files + sorted(SHARED_REAL.rglob("*.yaml")) + sorted(SHARED_REAL.rglob("*.json"))
    found = []
    for f in files:
        try:
            text = f.read_text()
            docs = [json.loads(text)] if f.suffix == ".json" else [d for d in yaml.safe_load_all(text) if d]
        except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        objs: list[Any] = []
        for d in docs:
            objs += d["items"] if isinstance(d, dict) and isinstance(d.get("items"), list) else [d]
        found += [(f"{f.name}#{i}", _json_ready(o)) for i, o in enumerate(objs) if isinstance(o, dict) and keep(o)]
    return found


def typed_item(doc_type: type[msgspec.Struct], obj: Any) -> Any:
    """``obj`` through the LIST's typed decode: a page of one item, as the informer receives it."""
    (item,) = page_decoder(doc_type)(orjson.dumps({"kind": "List", "metadata": {}, "items": [obj]}))["items"]
    return item


def reach(objects: st.SearchStrategy[Any], doc_type: type[msgspec.Struct],
          from_doc: Callable[[Any, Any], Any], arg: Any) -> tuple[int, int]:
    """Over a fixed sample of ``objects``: how many the typed reader reads, and how many it
    refuses (:class:`Unclean`), of those that decode as ``doc_type``. A property comparing both
    paths is evidence only where both counts are large."""
    typed = refused = 0

    @settings(max_examples=200, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(objects)
    def sample(obj: Any) -> None:
        nonlocal typed, refused
        doc = typed_item(doc_type, obj)
        if isinstance(doc, doc_type):
            try:
                from_doc(doc, arg)
                typed += 1
            except Unclean:
                refused += 1

    sample()
    return typed, refused
