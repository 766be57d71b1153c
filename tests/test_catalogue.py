"""The README's metric catalogue and flag table match the code, both ways.

Families are declared as data at module level (kube-state-metrics style), so importing every
module of the package and collecting the :class:`Family` objects finds everything that can be
exported; flags come from the real argparse parser.
"""

from __future__ import annotations

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


def _flag_rows() -> dict[str, set[str]]:
    """The flag table: each flag's row and the subcommands its ``commands`` column names."""
    rows = {}
    for flag, commands in re.findall(r"^\| `(--[a-z0-9-]+)` \| ([^|]*) \|", _section("Flags"), re.M):
        rows[flag] = {c.strip() for c in commands.split(",")}
    return rows


def test_every_flag_of_every_subcommand_is_in_the_flag_table() -> None:
    """Both ways, per subcommand: a flag's row names each subcommand that takes it (``all``:
    every one), and names no subcommand that does not."""
    _, subparsers = build_parser()
    taken: dict[str, set[str]] = {}
    for name, sp in subparsers.items():
        for action in sp._actions:
            for o in action.option_strings:
                if o.startswith("--") and o != "--help":
                    taken.setdefault(o, set()).add(name)
    rows = _flag_rows()
    assert sorted(set(taken) - set(rows)) == [], "flags missing from the README flag table"
    assert sorted(set(rows) - set(taken)) == [], "flag table rows for flags that do not exist"
    every = set(subparsers)
    wrong = {flag: (sorted(every if rows[flag] == {"all"} else rows[flag]), sorted(names))
             for flag, names in taken.items() if (every if rows[flag] == {"all"} else rows[flag]) != names}
    assert wrong == {}, "flag rows whose commands column is not the subcommands that take the flag"


def test_every_source_of_resources_is_listed() -> None:
    from exporter.kube.resources import COLLECTOR_RESOURCES

    row = next(line for line in _section("Flags").splitlines() if line.startswith("| `--resources` |"))
    listed = re.findall(r"`([a-z_]+)`", row.split("|")[4])
    assert listed == [r.source for r in COLLECTOR_RESOURCES]
