"""gangscope's alert and recording rules: generated from one config, valid, unit-tested, documented.

promtool is Debian 12's (2.42); scripts/setup-env installs it. The unit tests themselves live in
alerts/tests/*.yaml; here they run, and a meta-test holds each alert to the test idiom of the
monitoring mixins: a firing case with exact labels and annotations, and quiet evaluations (just
short of `for`, and where the condition does not hold).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from metric_contract import KNOWN, metric_names

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "alerts"
RUNBOOK = ROOT / "docs" / "runbook.md"
RULE_FILES = [ALERTS / "gangscope-alerts.yaml", ALERTS / "gangscope-rules.yaml"]
UNIT_TESTS = sorted((ALERTS / "tests").glob("*.yaml"))


def load_generator() -> ModuleType:
    """alerts/generate.py is a script, not part of the package; load it by path."""
    spec = importlib.util.spec_from_file_location("gangscope_alerts_generate", ALERTS / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def rules(kind: str) -> list[dict]:
    found = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            found += [r for r in group["rules"] if kind in r]
    return found


def test_generated_files_match_config() -> None:
    result = subprocess.run([sys.executable, str(ALERTS / "generate.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_threshold_changed_in_config_reaches_expression_description_and_runbook_table() -> None:
    gen = load_generator()
    cfg = gen.Config.load()
    alerts = dict(cfg.alerts)
    alerts["GangscopeWorkloadNVLinkThroughputDrop"] = {**alerts["GangscopeWorkloadNVLinkThroughputDrop"], "ratio": 0.3, "for": "20m"}
    changed = dataclasses.replace(cfg, alerts=alerts)
    rule = next(r for g in gen.alert_rules(changed) for r in g["rules"] if r["alert"] == "GangscopeWorkloadNVLinkThroughputDrop")
    assert "< 0.3 * sum by (namespace, workload)" in rule["expr"]
    assert "offset 25m" in rule["expr"]  # baseline ends rate window + for before now
    assert rule["for"] == "20m"
    assert "below 0.3 of its average" in rule["annotations"]["description"]
    table = gen._runbook(changed, RUNBOOK.read_text())
    assert "| [GangscopeWorkloadNVLinkThroughputDrop](#gangscopeworkloadnvlinkthroughputdrop) | warning | 20m | `ratio: 0.3`" in table


def test_config_rejects_a_domain_level_that_is_not_a_topology_level(tmp_path: Path) -> None:
    gen = load_generator()
    raw = yaml.safe_load((ALERTS / "config.yaml").read_text())
    raw["domain_alert_level"] = "zone"
    bad = tmp_path / "config.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="zone"):
        gen.Config.load(bad)


def test_promtool_check_rules() -> None:
    result = subprocess.run(["promtool", "check", "rules", *map(str, RULE_FILES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 37 rules found" in result.stdout


@pytest.mark.parametrize("test_file", UNIT_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(test_file: Path) -> None:
    result = subprocess.run(["promtool", "test", "rules", test_file.name], cwd=test_file.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_has_firing_and_quiet_unit_tests() -> None:
    firing: dict[str, int] = {}
    quiet: dict[str, int] = {}
    for path in UNIT_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                name = case["alertname"]
                if case["exp_alerts"]:
                    for alert in case["exp_alerts"]:
                        assert set(alert["exp_annotations"]) == {"summary", "description", "runbook_url"}, (path.name, name)
                        assert "severity" in alert["exp_labels"], (path.name, name)
                    firing[name] = firing.get(name, 0) + 1
                else:
                    quiet[name] = quiet.get(name, 0) + 1
    names = [r["alert"] for r in rules("alert")]
    assert [n for n in names if not firing.get(n)] == [], "alerts without a firing case"
    assert [n for n in names if quiet.get(n, 0) < 2] == [], "alerts without both a short-of-for and a silent case"


def test_recording_rules_are_unit_tested() -> None:
    tested = set()
    for path in UNIT_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("promql_expr_test", []):
                tested |= metric_names(case["expr"])
    records = {r["record"] for r in rules("record")}
    # The per-device rates are tested through every aggregate built on them.
    untested = {r for r in records - tested if not r.startswith(("gpu:", "node:"))}
    assert untested == set()


def test_alert_labels_and_annotations() -> None:
    base = yaml.safe_load((ALERTS / "config.yaml").read_text())["runbook_base_url"]
    for rule in rules("alert"):
        name = rule["alert"]
        assert re.fullmatch(r"Gangscope[A-Z][A-Za-z0-9]+", name)
        assert rule["labels"] == {"severity": rule["labels"]["severity"]}
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        notes = rule["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}
        assert notes["summary"].endswith(".") and "{{" not in notes["summary"], name
        assert "{{" in notes["description"], name
        assert notes["runbook_url"] == f"{base}#{name.lower()}"
        assert seconds(rule["for"]) > 0, f"{name}: every alert has a `for` (and a test just short of it)"


def test_the_runbook_base_url_is_the_projects_runbook_and_a_flag_changes_it(tmp_path: Path) -> None:
    """By default each runbook_url is a section of docs/runbook.md in the project's repository (the
    chart's home); --runbook-base-url points every alert at a copy elsewhere."""
    home = yaml.safe_load((ROOT / "deploy" / "helm" / "gangscope" / "Chart.yaml").read_text())["home"]
    assert load_generator().Config.load().runbook_base_url == f"{home}/blob/main/docs/runbook.md"
    out = tmp_path / "rule.yaml"
    # --check: the committed files stay as they are (and differ from this base: exit 1)
    run = subprocess.run([sys.executable, str(ALERTS / "generate.py"), "--check", "--runbook-base-url",
                          "https://wiki.example/ml/gangscope-runbook/", "--prometheusrule", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "gangscope-alerts.yaml is not what" in run.stderr, run.stderr
    alerts = [r for g in yaml.safe_load(out.read_text())["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts and {r["annotations"]["runbook_url"] for r in alerts} == \
        {f"https://wiki.example/ml/gangscope-runbook#{r['alert'].lower()}" for r in alerts}
    bad = subprocess.run([sys.executable, str(ALERTS / "generate.py"), "--check", "--runbook-base-url", "wiki/runbook"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--runbook-base-url wants an http(s) URL, got 'wiki/runbook'" in bad.stderr


def seconds(duration: str) -> int:
    match = re.fullmatch(r"(\d+)([smh])", duration)
    assert match, duration
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def test_runbook_has_a_section_per_alert_with_explain_and_justification() -> None:
    text = RUNBOOK.read_text()
    sections = dict(re.findall(r"^## (Gangscope\w+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    names = [r["alert"] for r in rules("alert")]
    assert sorted(sections) == sorted(names)
    for name in names:
        body = sections[name]
        for heading in ("**Meaning.**", "**Confirm.**", "**Act.**", "**Thresholds.**"):
            assert heading in body, f"{name}: missing {heading}"
        if name not in ("GangscopeTargetDown", "GangscopeSourceDown", "GangscopeParseErrors", "GangscopeInternalErrors"):
            assert "gangscope explain" in body, f"{name}: say how to confirm with gangscope explain"


def test_recording_rule_names_follow_level_metric_operations() -> None:
    for rule in rules("record"):
        level, metric, ops = rule["record"].split(":")
        # gangscope's own series, or a dcgm-exporter family joined to gangscope's labels
        assert re.fullmatch(r"[a-z_]+", level) and metric.startswith(("gangscope_", "DCGM_FI_")), rule["record"]
        assert re.fullmatch(r"[a-z0-9_]+", ops), rule["record"]
        assert metric.rstrip("s") and not metric.endswith("_total"), "recorded rates drop _total"


def test_rules_only_query_exported_or_recorded_series() -> None:
    records = {r["record"] for r in rules("record")}
    for rule in rules("alert") + rules("record"):
        unknown = metric_names(rule["expr"]) - KNOWN - records
        assert unknown == set(), (rule.get("alert") or rule["record"], unknown)


def test_prometheusrule_manifest_holds_the_same_groups(tmp_path: Path) -> None:
    out = tmp_path / "prometheusrule.yaml"
    subprocess.run([sys.executable, str(ALERTS / "generate.py"), "--check", "--prometheusrule", str(out), "--namespace", "monitoring"], check=True)
    manifest = yaml.safe_load(out.read_text())
    assert manifest["apiVersion"] == "monitoring.coreos.com/v1" and manifest["kind"] == "PrometheusRule"
    assert manifest["metadata"]["namespace"] == "monitoring"
    plain = [g for path in RULE_FILES[::-1] for g in yaml.safe_load(path.read_text())["groups"]]
    assert manifest["spec"]["groups"] == plain


DEMO_RULES = [ROOT / "exporter" / "sim" / "rules" / "gangscope-alerts.yaml", ROOT / "exporter" / "sim" / "rules" / "gangscope-rules.yaml"]


def test_demo_rules_are_the_shipped_rules_shortened() -> None:
    """Same groups, alerts, labels and annotations as the shipped files; every `for` the demo's,
    every group evaluated at the demo's interval, and promtool accepts them."""
    gen = load_generator()
    demo = gen.Config.load().demo
    for shipped, short in zip(RULE_FILES, DEMO_RULES, strict=True):
        ours, theirs = yaml.safe_load(shipped.read_text())["groups"], yaml.safe_load(short.read_text())["groups"]
        assert [g["name"] for g in ours] == [g["name"] for g in theirs]
        assert {g["interval"] for g in theirs} == {demo["interval"]}
        for g_ours, g_theirs in zip(ours, theirs, strict=True):
            for r_ours, r_theirs in zip(g_ours["rules"], g_theirs["rules"], strict=True):
                assert (r_ours.get("alert"), r_ours.get("labels")) == (r_theirs.get("alert"), r_theirs.get("labels"))
                if "alert" in r_ours:
                    assert r_theirs["for"] == demo["for"]
                    assert r_ours["annotations"]["runbook_url"] == r_theirs["annotations"]["runbook_url"]
                else:  # recording rules: the rate window is part of their names
                    assert r_theirs["record"] == r_ours["record"].replace(f"rate{gen.Config.load().rate_window}", f"rate{demo['rate_window']}")
    result = subprocess.run(["promtool", "check", "rules", *map(str, DEMO_RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shortening_is_mechanical_so_new_rules_need_nothing() -> None:
    """A duration key the generator has never seen is shortened too; thresholds are not."""
    gen = load_generator()
    cfg = gen.Config.load()
    alerts = {**cfg.alerts, "GangscopeNVLinkErrorsRising": {**cfg.alerts["GangscopeNVLinkErrorsRising"], "stall_window": "45m"}}
    short = dataclasses.replace(cfg, alerts=alerts).shortened()
    spec = short.alerts["GangscopeNVLinkErrorsRising"]
    assert spec == {"severity": "warning", "window": cfg.demo["window"], "min_errors": 10, "for": cfg.demo["for"],
                    "stall_window": cfg.demo["window"]}
    assert short.rate_window == cfg.demo["rate_window"]
    every = [v for a in short.alerts.values() for k, v in a.items() if isinstance(v, str) and re.fullmatch(r"\d+[smhd]", v)]
    assert set(every) == {cfg.demo["for"], cfg.demo["window"]}
