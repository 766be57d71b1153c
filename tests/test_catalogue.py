"""The README's metric catalogue and flag table match the code, both ways.

Families are declared as data at module level (kube-state-metrics style), so importing every
module of the package and collecting the :class:`Family` objects finds everything that can be
exported; flags come from the real argparse parser.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
from pathlib import Path

import exporter
from exporter.cli import build_parser
from exporter.exposition import Exposition, Family

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start: end if end > 0 else None]


def code_families() -> dict[str, Family]:
    found: dict[str, Family] = {Exposition.DROPPED.name: Exposition.DROPPED}
    for info in pkgutil.walk_packages(exporter.__path__, "exporter."):
        if "_pb2" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            items = value if isinstance(value, (tuple, list)) else (value,)
            for item in items:
                if isinstance(item, Family):
                    found[item.name] = item
    return found


def readme_families() -> dict[str, str]:
    rows = re.findall(r"^\| `(gangscope_[a-z0-9_]+)` \| (gauge|counter|info) \|", _section("Metric catalogue"), re.M)
    return dict(rows)


def test_every_exported_family_is_catalogued_and_vice_versa() -> None:
    code = code_families()
    doc = readme_families()
    assert sorted(set(code) - set(doc)) == [], "exported but missing from the README catalogue"
    assert sorted(set(doc) - set(code)) == [], "in the README catalogue but not exported"
    wrong_type = {n: (f.kind, doc[n]) for n, f in code.items() if doc[n] != f.kind}
    assert wrong_type == {}


def test_process_families_are_catalogued_and_vice_versa() -> None:
    """The process and platform families rendered at scrape time (prometheus_client's collectors)."""
    from prometheus_client.parser import text_string_to_metric_families

    from exporter.selfmetrics import SelfMetrics

    rendered = {}
    for family in text_string_to_metric_families(SelfMetrics(Exposition()).render(False).decode()):
        for sample in family.samples:
            rendered[sample.name] = "counter" if sample.name.endswith("_total") else family.type
    doc = dict(re.findall(r"^\| `((?:process|python)_[a-z0-9_]+)` \| (gauge|counter|info) \|", _section("Metric catalogue"), re.M))
    assert doc == rendered


def test_every_flag_is_in_the_flag_table() -> None:
    _, subparsers = build_parser()
    flags = set()
    for sp in subparsers.values():
        for action in sp._actions:
            flags.update(o for o in action.option_strings if o.startswith("--") and o != "--help")
    table = set(re.findall(r"^\| `(--[a-z0-9-]+)", _section("Flags"), re.M))
    assert sorted(flags - table) == [], "flags missing from the README flag table"
    assert sorted(table - flags) == [], "flag table rows for flags that do not exist"
