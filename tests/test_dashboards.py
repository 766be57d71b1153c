"""gangscope's Grafana dashboards: current with their generator, and held to the house rules.

Rules (shared/CONVENTIONS.md): stable unique uids, the datasource variable first and
`${datasource}` on every panel and target, a unit and a description on every panel,
`$__rate_interval` in every rate, no `__inputs`; every metric a query names is exported by
gangscope, by Kueue, or recorded by gangscope's rules; every query is valid PromQL to promtool.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from metric_contract import KNOWN, metric_names

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
RECORDED = {
    rule["record"]
    for group in yaml.safe_load((ROOT / "alerts" / "gangscope-rules.yaml").read_text())["groups"]
    for rule in group["rules"]
}
EXPECTED_UIDS = {"gangscope-overview", "gangscope-topology", "gangscope-workload", "gangscope-gpu-interconnect", "gangscope-capacity"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def panels(board: dict) -> list[dict]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found += panel.get("panels", [])
    return [p for p in found if p["type"] != "row"]


def queries(board: dict) -> list[str]:
    exprs = [t["expr"] for p in panels(board) for t in p["targets"]]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["query"]["query"])
    return exprs


def as_promql(expr: str) -> str:
    """A Grafana query as plain PromQL: label_values() unwrapped, variables replaced."""
    match = re.fullmatch(r"label_values\((.*),\s*\w+\)", expr)
    if match:
        expr = match.group(1)
    return expr.replace("$__rate_interval", "5m").replace("${datasource}", "x").replace("$", "")


def test_generated_dashboards_are_current() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "dashboards" / "generate.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_five_dashboards_with_stable_unique_uids() -> None:
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert sorted(uids) == sorted(EXPECTED_UIDS)
    for path in DASHBOARDS:
        assert path.stem == load(path)["uid"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_datasource_variable_first_and_on_every_panel_and_target(path: Path) -> None:
    board = load(path)
    assert "__inputs" not in board
    first = board["templating"]["list"][0]
    assert (first["name"], first["type"], first["query"]) == ("datasource", "datasource", "prometheus")
    for var in board["templating"]["list"][1:]:
        assert var["datasource"] == DATASOURCE, var["name"]
    for panel in panels(board):
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_has_unit_description_and_a_place(path: Path) -> None:
    board = load(path)
    titles = []
    for panel in panels(board):
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
        assert len(panel.get("description", "")) > 20, panel["title"]
        pos = panel["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        titles.append(panel["title"])
    assert len(titles) == len(set(titles)), "panel titles repeat"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_rates_use_rate_interval(path: Path) -> None:
    for expr in queries(load(path)):
        for window in re.findall(r"\b(?:rate|irate|increase|delta)\([^\[]*\[([^\]]*)\]", expr):
            assert window == "$__rate_interval", expr


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_queries_name_only_exported_or_recorded_metrics(path: Path) -> None:
    for expr in queries(load(path)):
        names = metric_names(as_promql(expr))
        assert names, expr
        assert names - KNOWN - RECORDED == set(), expr


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    exprs = [as_promql(e) for p in DASHBOARDS for e in queries(load(p))]
    rules = {"groups": [{"name": "dashboard-queries", "rules": [{"record": f"dashboard:query_{i}:check", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_the_topology_view_puts_the_three_interconnects_side_by_side() -> None:
    board = load(ROOT / "dashboards" / "gangscope-topology.json")
    row = {p["title"]: p["gridPos"] for p in panels(board) if p["title"].endswith("per rack")}
    same_row = {row[t]["y"] for t in ("NVLink per rack", "PCIe per rack", "Fabric per rack")}
    assert len(same_row) == 1
