"""Every query gangscope ships runs on the real thing: Debian's Prometheus after it scraped the demo.

promtool (tests/test_alerts.py, tests/test_dashboards.py) only parses a query; a real PromQL
engine refuses more than a parser does ("vector cannot contain metrics with the same labelset"
when ``rate()`` over ``{__name__=~"a|b"}`` is summed so both names collapse to one label set,
a many-to-many match, a range over a range), and a query that parses and runs can still be empty
because it names a label or a series the exporters never write. So this test runs each shipped
query on a Prometheus that scraped the demo's real collector and simulated agents every second
(``exporter.demo.Demo``, its timeline played) with the shipped rule files loaded, and asserts that
none is refused and that each the demo is built to light is non-empty at some point of the run.

The queries are FOUND, not listed: the alert and recording rules from alerts/generate.py's
groups and every rendered copy of them (alerts/*.yaml, the kustomize PrometheusRule, the Helm
chart's copy, the demo's shortened rules); every panel target and template variable of the
dashboards, from dashboards/generate.py and every committed copy; explain's queries from the
functions that build them (exporter/interconnect.py, exporter/training_layer.py), for the demo's
real llama-train Workload, and what a real ``gangscope explain`` sends, recorded by a proxy. A
new rule, panel or explain query is therefore tested the day it lands.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
import realprom
import yaml

from exporter import interconnect, training_layer
from exporter.rule_queries import Rules

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not realprom.AVAILABLE, reason="needs Debian's prometheus and promtool (scripts/setup-env installs them)"),
]

SCRAPE = "1s"  # the demo's scrape and rule evaluation interval: a minute of run is 60 samples a series
RUN_AFTER_UP = 75.0  # seconds of scrapes after every target is up: past the timeline's last change (+45 s)
# What Grafana writes for $__rate_interval with its default 15 s scrape-interval setting on a short
# time range: max($__interval + 15s, 4 * 15s). $__interval and $__range for the last 5 minutes.
GRAFANA_BUILTINS = {"$__rate_interval": "1m", "${__rate_interval}": "1m", "$__interval": "1s", "${__interval}": "1s",
                    "$__range": "5m", "${__range}": "5m", "$__range_s": "300", "$__range_ms": "300000"}
EXPLAINED = ("ml-team", "llama-train")  # the job explain is asked about: running, on NVLink, with a training process


def _load_script(name: str, path: Path) -> ModuleType:
    """alerts/generate.py and dashboards/generate.py are scripts, not modules of the package."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ALERTS_GEN = _load_script("gangscope_alerts_generate", ROOT / "alerts" / "generate.py")
DASH_GEN = _load_script("gangscope_dashboards_generate", ROOT / "dashboards" / "generate.py")


# --- finding the queries ------------------------------------------------------------------------

@dataclass(frozen=True)
class Board:
    """A dashboard's template variables in the order Grafana resolves them: (name, query, multi, allValue)."""

    name: str
    variables: tuple[tuple[str, str, bool, str | None], ...]


@dataclass
class Query:
    """One shipped query and every place that ships it (the same text in several copies is run once).

    ``board``: the dashboard whose variables to substitute; ``twin``: for a rule, the same rule as the
    demo's Prometheus evaluates it (:func:`demo_groups`), which the demo's timeline lights."""

    key: str
    text: str
    sources: list[str] = field(default_factory=list)
    board: Board | None = None
    variable: str | None = None  # a template variable's label: label_values(text, variable)
    twin: str | None = None  # a rule's expression as the demo's Prometheus evaluates it (:func:`demo_config`)


def demo_groups(shipped_windows: bool = True) -> list[dict[str, Any]]:
    """The rules this test's Prometheus loads: the demo's (alerts/generate.py's groups from the
    ``demo`` section of config.yaml, every ``for`` and window cut to seconds, exactly what
    ``gangscope demo --prometheus`` runs: its timeline is built to light them within a minute),
    plus the shipped recording rules whose names carry the shipped rate window
    (``...:rate5m``, ``...:rate5m_median``, where the demo records ``...:rate10s``), because the
    dashboards read those (``shipped_windows``; explain is given the demo's rules alone, as the
    demo gives them), each group evaluated every :data:`SCRAPE`."""
    cfg = ALERTS_GEN.Config.load()
    short = cfg.shortened()
    suffix = f":rate{cfg.rate_window}"
    shipped = [{"name": g["name"] + ".shipped-rate-window", "rules": [r for r in g["rules"] if suffix in r.get("record", "")]}
               for g in ALERTS_GEN.recording_rules(cfg)]
    groups = [*ALERTS_GEN.recording_rules(short), *ALERTS_GEN.alert_rules(short),
              *(g for g in shipped if g["rules"] and shipped_windows)]
    # every group evaluated at the demo's interval, as the demo's own files say (explain inlines a
    # recorded series as a subquery stepped at its group's interval)
    return [{"name": g["name"], "interval": SCRAPE, **{k: v for k, v in g.items() if k != "name"}} for g in groups]


def rule_keys(groups: list[dict[str, Any]]) -> Iterator[tuple[tuple[str, str, int], dict[str, Any]]]:
    """Each rule with its key (group, name, n): the n-th rule of that name in its group (several
    rules record one series name, one per signal or throughput mapping), the name with the demo's
    rate window, so a shipped rule and its demo copy have the same key."""
    cfg = ALERTS_GEN.Config.load()
    for group in groups:
        seen: dict[str, int] = {}
        for rule in group["rules"]:
            name = (rule.get("alert") or rule["record"]).replace(f":rate{cfg.rate_window}", f":rate{cfg.demo['rate_window']}")
            seen[name] = seen.get(name, 0) + 1
            yield (group["name"], name, seen[name]), rule


def _rule_groups() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(where, groups) for the generator's groups and every rendered copy of them."""
    cfg = ALERTS_GEN.Config.load()
    yield "alerts/generate.py", ALERTS_GEN.alert_rules(cfg) + ALERTS_GEN.recording_rules(cfg)
    for rel in ("alerts/gangscope-alerts.yaml", "alerts/gangscope-rules.yaml", "deploy/helm/gangscope/files/prometheus-rules.yaml"):
        yield rel, yaml.safe_load((ROOT / rel).read_text())["groups"]
    yield "deploy/base/prometheusrule.yaml", yaml.safe_load((ROOT / "deploy/base/prometheusrule.yaml").read_text())["spec"]["groups"]
    for path in sorted((ROOT / "exporter/sim/rules").glob("*.yaml")):
        yield str(path.relative_to(ROOT)), yaml.safe_load(path.read_text())["groups"]


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _dashboards() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, board JSON) for the generator's render and every committed copy."""
    for path, text in DASH_GEN.render().items():
        yield f"dashboards/generate.py:{path.name}", json.loads(text)
    for folder in ("dashboards", "deploy/base/dashboards", "deploy/helm/gangscope/files/dashboards"):
        for path in sorted((ROOT / folder).glob("*.json")):
            yield str(path.relative_to(ROOT)), json.loads(path.read_text())


def _board(doc: dict[str, Any]) -> Board:
    return Board(doc["uid"], tuple((v["name"], v["query"]["query"] if isinstance(v["query"], dict) else v["query"],
                                    bool(v.get("multi")) or bool(v.get("includeAll")), v.get("allValue"))
                                   for v in doc["templating"]["list"] if v["type"] == "query"))


def _label_values(expr: str) -> tuple[str, str]:
    """``label_values(SELECTOR, LABEL)`` as (selector, label); Grafana sends the selector as match[]."""
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", expr.strip(), re.DOTALL)
    assert m, f"a variable query Grafana's Prometheus source would not run as label values: {expr}"
    return m.group(1), m.group(2)


def explain_queries(namespace: str, workload: str, start: float | None, now: float, rules: Rules) -> dict[str, str]:
    """explain's instant and range queries for one Workload, by name, through the functions that
    build them (the explain layers call the same ones): the interconnect layer's history and
    per-GPU rates (now, and over the first hour or whatever part of it Prometheus holds), the
    training layer's verdict and what it read (throughput, baseline, ratios, scheduling events,
    hardware signals), inlined from ``rules``, the rules this test's Prometheus evaluates."""
    out = {"interconnect:history": interconnect.history_query(namespace, workload, interconnect.BASELINE_WINDOW)}
    out |= {f"interconnect:{k}": q for k, q in interconnect.printed_queries(namespace, workload, start, now).items()}
    out |= {f"training:{k}": q for k, q in training_layer.queries(namespace, workload, rules).items()}
    return out


def collect() -> dict[str, Query]:
    """Every rule and dashboard query by its text (the explain queries depend on the clock: see
    :func:`explain_queries`). Keys are short, stable ids for the test report."""
    found: dict[str, Query] = {}

    def add(text: str, where: str, board: Board | None = None, variable: str | None = None, name: str = "") -> None:
        ident = (board.name if board else "", text, variable)
        key = next((k for k, q in found.items() if (q.board.name if q.board else "", q.text, q.variable) == ident), None)
        if key is None:
            key = name
            n = 2
            while key in found:
                key, n = f"{name}#{n}", n + 1
            found[key] = Query(key, text, board=board, variable=variable)
        found[key].sources.append(where)

    twins = {k: str(r["expr"]).strip() for k, r in rule_keys(demo_groups())}
    for where, groups in _rule_groups():
        for (group, _, n), rule in rule_keys(groups):
            name = rule.get("alert") or rule["record"]
            text = str(rule["expr"]).strip()
            add(text, f"{where}: {group}/{name}", name=f"{'demo:' if where.startswith('exporter/sim') else ''}{name}")
            q = next(q for q in found.values() if q.board is None and q.text == text)
            q.twin = q.twin or twins[(group, _, n)]
    for where, doc in _dashboards():
        board = _board(doc)
        for var, expr, _, _ in board.variables:
            add(expr, f"{where}: ${var}", board, _label_values(expr)[1], name=f"{board.name}:${var}")
        for panel in _panels(doc["panels"]):
            for target in panel.get("targets", []):
                add(target["expr"], f"{where}: {panel['title']} [{target.get('refId', '')}]", board,
                    name=f"{board.name}:{panel['title']}:{target.get('refId', '')}")
    return found


QUERIES = collect()


def shipped_counts() -> tuple[int, int]:
    """(rules, panel targets) counted straight from the committed files, not through collect()."""
    rules = sum(len(g["rules"]) for rel in ("alerts/gangscope-alerts.yaml", "alerts/gangscope-rules.yaml")
                for g in yaml.safe_load((ROOT / rel).read_text())["groups"])
    panels = sum(len(p.get("targets", [])) for path in (ROOT / "dashboards").glob("*.json")
                 for p in _panels(json.loads(path.read_text())["panels"]))
    return rules, panels


# Queries the demo does not light, with why: they are still run and must not be refused, but may be
# empty (a target that misses scrapes on a loaded machine can light GangscopeTargetDown, say).
# First by the input the demo lacks:
ABSENT_INPUTS: dict[str, str] = {  # a pattern of the query's text: why no series match it
    r"DCGM_FI_": "the demo runs no dcgm-exporter, so there are no DCGM_FI_* series to join",
    r"gangscope_fabric_port_": "the demo's nodes have no NVSwitch fabric ports in their sysfs (no fabric port series)",
    r"\bkueue_[a-z_]+": "the demo runs no Kueue controller, so Kueue's own metrics (kueue_*) are absent",
    r"\bsamples_total\b": "the demo's training processes export tokens_per_second, not samples_total",
    # the TrainJob mapping, gated on a fresh report (and its stale count, lit or vector(0) anyway)
    r"gangscope_job_trainer_metric\{[^}]*\}\n *and on \(namespace, name\) \(time\(\) - ": (
        "the demo's one TrainJob that reports tokens_per_second (gemma-sft) is hung, its last report 40 minutes old: "
        "its frozen value is left out of the throughput (alerts/tests/training.yaml lights it)"),
}
# ... then each query whose condition the demo's scenario does not stage:
GANGSCOPE_HEALTHY = "gangscope itself is healthy in the demo: every target up, every source synced, no errors"
NOT_LIT: dict[str, str] = {
    "GangscopeInternalErrors": GANGSCOPE_HEALTHY, "GangscopeParseErrors": GANGSCOPE_HEALTHY,
    "GangscopeSourceDown": GANGSCOPE_HEALTHY, "GangscopeTargetDown": GANGSCOPE_HEALTHY,
    "GangscopeGPUCounterReadGaps": "the demo's simulated GPUs read every counter (tests/test_demo.py asserts no read gap)",
    "gangscope-gpu-interconnect:PCIe counter read gaps:A": "as GangscopeGPUCounterReadGaps: the demo's GPUs read every counter",
    "GangscopeShardingMismatch": "the demo runs one collector, unsharded",
    "GangscopeShardsMissing": "the demo runs one collector, unsharded",
    "GangscopeClusterQueueInadmissible": "every ClusterQueue of the demo is active and configured",
    "GangscopeGangStartingTooLong": "no gang of the demo stays in the starting stage",
    "GangscopeHardwareSpansTopologyDomains": "the demo mislabels one node into another chassis's rack, not one chassis across racks",
    "GangscopeJobRestartLoop": "the demo's JobSet restarts once, below the alert's 3 restarts",
    "GangscopeJobSlowScheduling": "the demo's slowed jobs are not re-placed or evicted (its verdicts are hardware and workload)",
    "namespace_workload:gangscope_job_slowdown:ratio": "the scheduling verdict: as GangscopeJobSlowScheduling",
    # timing-dependent: lit in some runs and not others on a loaded machine (not investigated further)
    "GangscopeWorkloadNVLinkThroughputDrop": "lit in 2 of the last 3 runs: the +45 s slowdown against a 20 s baseline",
    "GangscopeThroughputMetricUnjoined": "lit in 1 of the last 2 runs: a training series before its pod is joined",
    "GangscopeWorkloadMisconfigured": "lit in 2 of the last 4 runs: a pending reason of category configuration, briefly",
    "GangscopeClusterQueuePodsReadyTimeoutEvictions": "the demo's only eviction is for NodeFailures",
    "GangscopeWorkloadPodsReadyTimeoutEviction": "the demo's only eviction is for NodeFailures",
    "cluster_queue:gangscope_workload_past_execution_seconds:sum": "no demo Workload ran, was evicted and got readmitted",
    "gangscope-capacity:Run time ended by evictions:A": "no demo Workload ran, was evicted and got readmitted",
    "explain:interconnect:nvlink_first_hour": "the jobs' first hour was hours before this Prometheus started",
    "explain:interconnect:pcie_first_hour": "the jobs' first hour was hours before this Prometheus started",
}


def not_lit(key: str, text: str) -> str | None:
    """Why the demo leaves this query empty, or None where it must light it (a demo copy of a rule
    as the rule)."""
    return NOT_LIT.get(key.removeprefix("demo:")) or next((why for pattern, why in ABSENT_INPUTS.items() if re.search(pattern, text)), None)


# --- the running demo and its Prometheus --------------------------------------------------------

class PromHTTP:
    """Prometheus's HTTP API, answered as it is: the HTTP status, and the body's status and error."""

    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, path: str, params: dict[str, str] | list[tuple[str, str]]) -> tuple[int, dict[str, Any]]:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=60) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read())
            except ValueError:
                return exc.code, {"status": "error", "error": f"HTTP {exc.code}"}


@dataclass
class Outcome:
    """What Prometheus answered a query: refused (HTTP >= 400 or status error) with why, or how many
    series the instant query and the range query over the run returned."""

    query: str
    error: str | None = None
    instant: int = 0
    ranged: int = 0


class Run:
    """The demo (collector, agents, training processes, its timeline) on its own event loop in a
    thread, Prometheus scraping it every second with the shipped rule files, and the clock of the run."""

    def __init__(self, workdir: Path) -> None:
        from exporter.demo import Demo

        workdir.mkdir(parents=True, exist_ok=True)
        self.rules_file = workdir / "rules.yaml"
        self.demo = Demo(scenario_name="default", with_prometheus=True, workdir=workdir, prometheus_interval=SCRAPE,
                         prometheus_rules=[self.rules_file])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.outcomes: dict[str, Outcome] = {}
        self.settings: dict[str, list[dict[str, str]]] = {}  # a board's variable settings, resolved once

    def call(self, coro: Any, timeout: float = 120) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def start(self) -> None:
        # the demo's fixed training baselines (``@ <seconds after its start>``) rebased as the demo
        # rebases its own rule files, onto the moment it starts (the file is read as Prometheus starts)
        self.started = time.time()
        text = self.rebased(ALERTS_GEN.dump({"groups": demo_groups()}))
        self.rules_file.write_text(text)
        demo_only = {g["name"] for g in demo_groups(shipped_windows=False)}
        groups = [g for g in yaml.safe_load(text)["groups"] if g["name"] in demo_only]
        self.rules = Rules(groups)
        self.explain_rules_file = self.rules_file.with_name("demo-rules.yaml")  # what the demo gives explain
        self.explain_rules_file.write_text(ALERTS_GEN.dump({"groups": groups}))
        self.thread.start()
        self.call(self.demo.start())
        assert self.call(self.demo.wait_synced(60)), "the collector or an agent did not sync"
        self.prom = PromHTTP(f"http://{self.demo.host}:{self.demo.prometheus_port}")
        targets = 1 + len(self.demo.agents)
        deadline = time.monotonic() + 90
        while True:
            try:
                _, body = self.prom.get("/api/v1/query", {"query": 'up{job=~"gangscope-collector|gangscope-agent"} == 1'})
                if len(body.get("data", {}).get("result", [])) == targets:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"not all {targets} gangscope targets up within 90 s"
            time.sleep(0.5)
        self.up_at = time.time()
        time.sleep(RUN_AFTER_UP)
        self.now = time.time()

    def stop(self) -> None:
        try:
            self.call(self.demo.stop(), timeout=60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    def rebased(self, text: str) -> str:
        """The demo's ``@ <seconds after its start>`` as the running demo writes it (exporter/demo.py demo_rules)."""
        from exporter.demo import rebased

        return rebased(text, self.started)

    def evaluate(self, expr: str) -> Outcome:
        """The instant query at the end of the run and the range query over all of it (1 s step),
        as a dashboard panel would ask, a demo rule's fixed time rebased onto this run; cached by text."""
        expr = self.rebased(expr)
        if expr in self.outcomes:
            return self.outcomes[expr]
        out = Outcome(expr)
        for path, params in (("/api/v1/query", {"query": expr, "time": f"{self.now:.3f}"}),
                             ("/api/v1/query_range", {"query": expr, "start": f"{self.up_at:.3f}", "end": f"{self.now:.3f}",
                                                      "step": "1"})):
            status, body = self.prom.get(path, params)
            if status >= 400 or body.get("status") != "success":
                out.error = f"HTTP {status} {body.get('errorType', '')}: {body.get('error', body)}"
                break
            n = len(body["data"]["result"])
            if path.endswith("range"):
                out.ranged = n
            else:
                out.instant = n
        self.outcomes[expr] = out
        return out

    def label_values(self, selector: str, label: str) -> list[str]:
        """What Grafana's Prometheus source sends for ``label_values(selector, label)``."""
        status, body = self.prom.get(f"/api/v1/label/{label}/values",
                                     [("match[]", selector), ("start", f"{self.up_at:.0f}"), ("end", f"{self.now:.0f}")])
        assert status == 200 and body.get("status") == "success", (selector, label, status, body)
        return sorted(body["data"])

    def resolve(self, board: Board) -> list[dict[str, str]]:
        """Every setting of the board's variables a user can pick, as Grafana writes them into the
        queries, resolved in order (a variable's query may use the ones before it): a multi-value
        variable set to every value it offers, a single-value one to each value in turn (so the
        workload board is tried on each Workload: a panel counts as lit where any Workload lights it)."""
        if board.name in self.settings:
            return self.settings[board.name]
        settings: list[dict[str, str]] = [{}]
        for name, expr, multi, _ in board.variables:
            grown = []
            for chosen in settings:
                selector, label = _label_values(substitute(expr, chosen))
                values = self.label_values(selector, label)
                assert values, f"{board.name}: ${name} offers no value with {chosen} ({expr})"
                picks = ["|".join(grafana_regex_escape(v) for v in values)] if multi else values
                grown += [{**chosen, name: v if not multi or len(values) == 1 else f"({v})"} for v in picks]
            settings = grown
        self.settings[board.name] = settings
        return settings


def grafana_regex_escape(value: str) -> str:
    """How Grafana's Prometheus source escapes one value of a multi-value variable for a regex
    matcher (public/app/plugins/datasource/prometheus: prometheusRegularEscape): a backslash for
    the regex and another for the PromQL string literal."""
    value = value.replace("\\", "\\\\\\\\")
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Grafana's interpolation of a query: its built-ins, then ``$var`` and ``${var}``."""
    for token, value in GRAFANA_BUILTINS.items():
        expr = expr.replace(token, value)
    for name, value in sorted(variables.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    return expr


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """One demo and one Prometheus for every query of the module (a minute and a half of scrapes)."""
    started = time.monotonic()
    r = Run(tmp_path_factory.mktemp("every-query"))
    try:
        r.start()
        print(f"\nevery-query: demo and Prometheus ready after {time.monotonic() - started:.1f} s")
        yield r
    except BaseException:
        log = r.demo.workdir / "prometheus.log"
        if log.exists():
            print("prometheus log (tail):\n" + log.read_text()[-4000:])
        raise
    finally:
        r.stop()
        print(f"every-query: {len(r.outcomes)} distinct queries evaluated; module took {time.monotonic() - started:.1f} s")


# --- the tests ----------------------------------------------------------------------------------

def test_every_rule_and_panel_is_found() -> None:
    """The collection is complete: at least one query per shipped rule and per panel target, and
    every place that ships rules or dashboards contributed (so a new copy cannot go unread)."""
    rules, panels = shipped_counts()
    occurrences = sum(len(q.sources) for q in QUERIES.values())
    assert occurrences >= rules + panels, (occurrences, rules, panels)
    shipped = {q.key for q in QUERIES.values() if q.board is None and not q.key.startswith("demo:")}
    assert len(shipped) >= rules - 1, (len(shipped), rules)  # the same expression may back two rules
    places = {s.split(":")[0] for q in QUERIES.values() for s in q.sources}
    assert {"alerts/generate.py", "alerts/gangscope-alerts.yaml", "deploy/base/prometheusrule.yaml",
            "deploy/helm/gangscope/files/prometheus-rules.yaml", "exporter/sim/rules/gangscope-rules.yaml",
            "dashboards/generate.py"} <= places, places
    assert not set(NOT_LIT) - set(QUERIES) - {"explain:" + k for k in EXPLAIN_KEYS}, \
        "an exception names a query no longer shipped"
    for pattern in ABSENT_INPUTS:
        assert any(re.search(pattern, q.text) for q in QUERIES.values()), f"no shipped query reads {pattern}: drop it"


@pytest.mark.parametrize("key", sorted(QUERIES))
def test_query_runs_on_real_prometheus(run: Run, key: str) -> None:
    """Prometheus answers the query (instant and over the run) without an error; where the demo
    lights it, with at least one series."""
    q = QUERIES[key]
    exprs = [substitute(q.text, chosen) for chosen in run.resolve(q.board)] if q.board else [q.text]
    lit = []
    for expr in exprs:
        assert not re.search(r"\$[A-Za-z_{]", expr), f"a variable left unsubstituted: {expr}"
        if q.variable:
            expr = _label_values(expr)[0]
        out = run.evaluate(expr)
        assert out.error is None, f"{key} refused by Prometheus: {out.error}\n{expr}\nshipped in: {q.sources}"
        lit.append(out.ranged > 0)
    if q.twin is not None and q.twin != q.text:  # the rule as the demo's Prometheus runs it, windows in seconds
        out = run.evaluate(q.twin)
        assert out.error is None, f"{key} (the demo's windows) refused by Prometheus: {out.error}\n{q.twin}"
        lit = [out.ranged > 0]
    if not_lit(key, q.twin or q.text) is None:
        assert any(lit), f"{key} empty through the demo's run\n{q.twin or exprs[0]}\nshipped in: {q.sources}"


EXPLAIN_KEYS = sorted(explain_queries("ns", "wl", 0.0, 3600.0, Rules(demo_groups(shipped_windows=False))))


# The demo's jobs explain is run for, between them lighting each signal its queries look for:
# llama-train (running on NVLink, a training process, a lagging GPU from +45 s), vit-large (evicted
# for NodeFailures at +40 s), gemma-eval (on the degraded node: a link down, NVLink errors). Every
# Workload of the demo would be 50 times the queries, minutes on a shared machine.
EXPLAIN_JOBS = (("ml-team", "llama-train"), ("research", "vit-large"), ("research", "gemma-eval"))


def demo_jobs(run: Run) -> list[tuple[str, str, float | None]]:
    """(namespace, Workload name, running since) of :data:`EXPLAIN_JOBS`, from the collector's store."""
    from exporter.explain import running_since

    found = sorted((w.namespace, w.name, running_since(w)) for w in run.demo.collector.store.workloads.values()
                   if any(w.namespace == ns and w.name.startswith(f"job-{job}-") for ns, job in EXPLAIN_JOBS))
    assert len(found) == len(EXPLAIN_JOBS), found
    return found


@pytest.mark.parametrize("key", EXPLAIN_KEYS)
def test_explain_query_runs_on_real_prometheus(run: Run, key: str) -> None:
    """Each query explain builds is answered for every Workload of the demo; where the demo lights
    it, non-empty for at least one (a link down, an eviction or a lagging GPU happens to some job)."""
    lit = []
    for namespace, workload, start in demo_jobs(run):
        expr = explain_queries(namespace, workload, start, run.now, run.rules).get(key, "")
        if not expr:  # the first-hour queries of a job that is not running
            continue
        out = run.evaluate(expr)
        assert out.error is None, f"explain's {key} for {namespace}/{workload} refused by Prometheus: {out.error}\n{expr}"
        lit.append(out.ranged > 0)
    if not_lit(f"explain:{key}", expr) is None:
        assert any(lit), f"explain's {key} empty through the demo's run for each of its {len(lit)} Workloads\n{expr}"


class Recorder(BaseHTTPRequestHandler):
    """A proxy in front of Prometheus that keeps every query explain sends and what came back."""

    upstream = ""
    seen: ClassVar[list[tuple[str, str, int, str | None]]] = []  # (API path, query, HTTP status, error)

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        """explain POSTs its queries as a form (the inlined rules are longer than a URL may be)."""
        self._forward(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

    def _forward(self, form: bytes | None) -> None:
        url = urllib.parse.urlsplit(self.path)
        params = urllib.parse.parse_qs(url.query if form is None else form.decode())
        request = urllib.request.Request(self.upstream + self.path, data=form,
                                         headers={"Content-Type": self.headers.get("Content-Type", "")} if form else {})
        try:
            with urllib.request.urlopen(request, timeout=60) as resp:
                status, body, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            status, body, ctype = exc.code, exc.read(), exc.headers.get("Content-Type", "")
        if "query" in params:
            try:
                doc = json.loads(body)
                error = None if status < 400 and doc.get("status") == "success" else f"HTTP {status}: {doc.get('error')}"
            except ValueError:
                error = f"HTTP {status}: not JSON"
            self.seen.append((url.path, params["query"][0], status, error))
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_explain_as_a_user_runs_it_sends_no_refused_query(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    """``gangscope explain ml-team/llama-train --prometheus URL`` against the demo: every query its
    layers actually send (recorded by a proxy, so one built outside the functions above is caught
    too) is answered; the interconnect layer reads the job's NVLink."""
    from exporter import explain

    Recorder.upstream, Recorder.seen = run.prom.base, []
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        parser = argparse.ArgumentParser()
        explain.add_arguments(parser)
        args = parser.parse_args(["/".join(EXPLAINED), "--kubeconfig", run.demo.kubeconfig,
                                  "--prometheus", f"http://127.0.0.1:{proxy.server_address[1]}", "--rules", str(run.explain_rules_file),
                                  "--output", "json"])
        capsys.readouterr()
        assert explain.run(args) == 0
        doc = json.loads(capsys.readouterr().out)
    finally:
        proxy.shutdown()
        proxy.server_close()
    sent = Recorder.seen
    assert len({q for _, q, _, _ in sent}) >= 10, sent
    refused = [(q, e) for _, q, _, e in sent if e is not None]
    assert not refused, refused
    inter = next(layer for layer in doc["layers"] if layer["name"] == "interconnect")
    assert inter["evidence"]["values_bytes_per_second"]["nvlink_now"] > 0, inter
    training = next(layer for layer in doc["layers"] if layer["name"] == "training")
    assert training["status"] != "unknown", training  # the rules' verdict, read through the proxy
