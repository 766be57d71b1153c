"""explain's training layer: is the job itself slower, and is it scheduling, hardware or the job?

The diagnosis of the ``gangscope-training.rules`` recording rules (alerts/generate.py
``training_rules``) for one Workload, computed from the scraped series, so it works on any
Prometheus that scrapes the jobs and gangscope (with or without gangscope's rules loaded, and on
history recorded before the rules were): the job's own throughput now against its rolling
baseline (its average over the hour that ends 15m before now, through a subquery); and, in the
rules' own expressions (:mod:`exporter.rule_queries` inlines them from the rules file the package
ships), its interconnect ratio (NVLink and PCIe, both directions), the scheduling events
(re-placement, gang timeout, eviction, job restart) and hardware signals (link down, NVLink
errors, fabric health, PCIe width, a straggler GPU, racks with mixed hardware, XIDs) of the last
30 minutes: an event or a signal the rules count, explain counts. Every query is in the layer's
evidence, so a user can run it.

:func:`verdict` is the judgement, a pure function of those numbers in the order and with the
conditions of the rules' verdicts; :func:`training_layer` runs the queries. The defaults equal
alerts/config.yaml's ``training`` section (tests/test_training_layer.py checks), and
``--throughput`` adds or replaces mappings the way ``training.throughput`` does.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from .interconnect import Prometheus, PrometheusError
from .rule_queries import Rules, for_workload

log = structlog.get_logger(__name__)

BASELINE = "1h"
OFFSET = "15m"  # rate window 5m + the verdicts' for 10m (alerts/generate.py baseline_offset)
WINDOW = "30m"
RATE = "5m"
RATIO = 0.7
INTERCONNECT_RATIO = 0.7
MIN_INTERCONNECT = 1e8  # bytes per second of baseline for the interconnect ratio to count
# the rules' records (alerts/generate.py): the rate window is part of the per-GPU record's name
SCHEDULING_EVENTS = "namespace_workload:gangscope_job_scheduling_events:count"
HARDWARE_SIGNALS = "namespace_workload:gangscope_job_hardware_signals:count"
INTERCONNECT = "namespace_workload:gangscope_interconnect_bytes:ratio"
GPU_NVLINK = "namespace_workload_gpu:gangscope_nvlink_bytes:rate"
STEP = 60  # seconds between the points of the "since when" range queries
LOOKBACK = 7200  # how far back "since when" looks


@dataclass(frozen=True)
class Mapping:
    """One throughput mapping (alerts/config.yaml training.throughput)."""

    name: str
    metric: str
    type: str = "gauge"
    unit: str = ""
    join: str = "pod"
    label: str = "pod"
    aggregate: str = "sum"
    match: str = ""

    def series(self, namespace: str, workload: str) -> str:
        """The mapped throughput of one Workload (one series, no labels)."""
        matchers = ", ".join(m for m in (self.match, f'namespace="{namespace}"') if m)
        src = f"{self.metric}{{{matchers}}}"
        if self.type == "counter":
            src = f"rate({src}[{RATE}])"
        key = "pod" if self.join == "pod" else "name"
        if self.label != key:
            src = f'label_replace({src}, "{key}", "$1", "{self.label}", "(.+)")'
        info = (f'max by (namespace, pod) (gangscope_gpu_pod_info{{namespace="{namespace}", workload="{workload}"}})'
                if self.join == "pod" else
                f'max by (namespace, name) (gangscope_job_info{{namespace="{namespace}", workload="{workload}"}})')
        return f"{self.aggregate}({src} * on (namespace, {key}) group_left () {info})"


DEFAULT_MAPPINGS = (
    Mapping("tokens_per_second", "tokens_per_second", "gauge", "tokens", "pod", "pod", "sum"),
    Mapping("samples_total", "samples_total", "counter", "samples", "pod", "pod", "sum"),
    Mapping("trainer_tokens_per_second", "gangscope_job_trainer_metric", "gauge", "tokens", "job", "name", "max",
            'kind="TrainJob", metric="tokens_per_second"'),
)


def parse_mapping(text: str) -> Mapping:
    """``METRIC[,type=counter][,join=job][,label=L][,aggregate=max][,unit=U]`` (the flag's form)."""
    metric, *opts = text.split(",")
    fields: dict[str, str] = {}
    for opt in opts:
        key, sep, value = opt.partition("=")
        if not sep or key not in ("type", "join", "label", "aggregate", "unit"):
            raise argparse.ArgumentTypeError(f"--throughput {text!r}: want METRIC[,type=..][,join=..][,label=..]"
                                             f"[,aggregate=..][,unit=..], got {opt!r}")
        fields[key] = value
    m = Mapping(metric, metric, **fields)
    if m.type not in ("gauge", "counter") or m.join not in ("pod", "job") or m.aggregate not in ("sum", "max", "avg"):
        raise argparse.ArgumentTypeError(f"--throughput {text!r}: type gauge|counter, join pod|job, aggregate sum|max|avg")
    if "label" not in fields:
        m = Mapping(m.name, m.metric, m.type, m.unit, m.join, "pod" if m.join == "pod" else "name", m.aggregate)
    return m


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--throughput", action="append", default=[], type=parse_mapping, metavar="METRIC[,OPTION=VALUE...]",
                   help="a throughput series the jobs export, for the training layer (repeatable; replaces the defaults "
                        "tokens_per_second, samples_total and TrainJob trainerStatus tokens_per_second, "
                        "alerts/config.yaml's training.throughput): type=gauge|counter, join=pod|job, label=LABEL, "
                        "aggregate=sum|max|avg")
    p.add_argument("--rules", type=Path, metavar="FILE",
                   help="the recording rules your Prometheus loads (alerts/generate.py's gangscope-rules.yaml, from your "
                        "config.yaml): the training layer asks their scheduling events and hardware signals (default: the rules "
                        "of the shipped config.yaml, installed with gangscope)")


def baseline_of(expr: str) -> str:
    return f"avg_over_time(({expr})[{BASELINE}:1m] offset {OFFSET})"


def ratio_of(expr: str) -> str:
    return f"({expr}) / ({baseline_of(expr)} > 0)"


def gpus_of(namespace: str, workload: str) -> str:
    return f'max by (node, gpu) (gangscope_gpu_pod_info{{namespace="{namespace}", workload="{workload}"}})'


def queries(namespace: str, workload: str, mappings: Sequence[Mapping], rules: Rules | None = None) -> dict[str, str]:
    """Every instant query of the layer, by name (the evidence prints them)."""
    rules = rules or Rules.load()
    one = lambda expr: for_workload(rules.inline(expr), namespace, workload)  # noqa: E731
    gpu = rules.named(GPU_NVLINK)
    out = {}
    for m in mappings:
        out[f"throughput:{m.name}"] = m.series(namespace, workload)
        out[f"baseline:{m.name}"] = baseline_of(m.series(namespace, workload))
    out |= {
        # the rules' verdicts read these three (alerts/generate.py training_rules)
        "interconnect_ratio": one(f"min by (namespace, workload) ({INTERCONNECT})"),
        "scheduling_events": one(SCHEDULING_EVENTS),
        "hardware_signals": one(HARDWARE_SIGNALS),
        # each GPU's own NVLink traffic (both directions) against its previous hour, to name the worst
        "nvlink_gpu_ratio": one(f"{gpu} / ({baseline_of(gpu)} > {MIN_INTERCONNECT:g})"),
    }
    return out


def range_queries(namespace: str, workload: str, mapping: Mapping, rules: Rules | None = None) -> dict[str, str]:
    """The ratios over the last two hours, to say since when each is down."""
    return {"throughput_ratio": ratio_of(mapping.series(namespace, workload)),
            "nvlink_gpu_ratio": queries(namespace, workload, (), rules)["nvlink_gpu_ratio"]}


@dataclass(frozen=True)
class Evidence:
    """What the queries found, as the verdict reads it."""

    throughput_ratio: float | None
    interconnect_ratio: float | None  # the job's NVLink ratio
    scheduling_events: tuple[str, ...]
    hardware_signals: tuple[str, ...]
    running: bool


def verdict(ev: Evidence) -> str | None:
    """scheduling, hardware, workload; ``"ok"`` when throughput is not down; None when it is down
    but the evidence decides nothing (no interconnect measured, a move with healthy links), or
    when there is no throughput or baseline. The same order and conditions as the recording rules."""
    if ev.throughput_ratio is None:
        return None
    if ev.throughput_ratio >= RATIO:
        return "ok"
    bw_down = ev.interconnect_ratio is not None and ev.interconnect_ratio < INTERCONNECT_RATIO
    if bw_down and ev.scheduling_events:
        return "scheduling"
    if not ev.running or ev.scheduling_events:
        return None
    if ev.hardware_signals:  # positive evidence on its GPUs; an even drop of every GPU's traffic is not
        return "hardware"
    if ev.interconnect_ratio is not None and not bw_down:  # measured and healthy
        return "workload"
    return None


def down_since(values: Sequence[Sequence[Any]], threshold: float) -> float | None:
    """The start of the last unbroken run of points below ``threshold`` that reaches the end."""
    since = None
    for t, v in values:
        if float(v) < threshold:
            since = float(t) if since is None else since
        else:
            since = None
    last = float(values[-1][0]) if values else None
    return since if last is not None and since is not None and float(values[-1][1]) < threshold else None


def _clock(t: float | None) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M") if t is not None else "?"


async def check_mappings(prom: Prometheus, mappings: Sequence[Mapping], now: float) -> dict[str, str]:
    """Each mapping's state from Prometheus's metadata and series: ok, missing (no series: renamed,
    not scraped, or no job exports it), wrong_type (Prometheus knows it as another type). A
    problem is logged with the metric's name; the layer goes on with the others."""
    out = {}
    for m in mappings:
        async with prom.session.get(prom.base + "/api/v1/metadata", params={"metric": m.metric}) as resp:
            meta = (await resp.json(content_type=None)).get("data", {}) if resp.status == 200 else {}
        types = {e.get("type") for e in meta.get(m.metric, [])} - {None, "unknown"}
        series = await prom.query(f"count({m.metric}{{{m.match}}})", now)
        if not series:
            state = "missing"
        elif types and m.type not in types:
            state = "wrong_type"
        else:
            state = "ok"
        if state != "ok":
            log.warning("throughput_mapping_problem", metric=m.metric, mapping=m.name, state=state,
                        expected_type=m.type, prometheus_types=sorted(t for t in types if t))
        out[m.name] = state
    return out


async def training_layer(namespace: str, workload: str, running: bool, prometheus: str | None, now: float,
                         mappings: Sequence[Mapping] = DEFAULT_MAPPINGS, rules: Rules | None = None) -> dict[str, Any]:
    """The explain layer dict (name, status, summary, evidence)."""
    import aiohttp

    qs = queries(namespace, workload, mappings, rules)
    evidence: dict[str, Any] = {"prometheus": prometheus, "queries": qs}
    if prometheus is None:
        return _layer("unknown", f"not checked: run with --prometheus URL, or query {qs[f'throughput:{mappings[0].name}']}"
                      if mappings else "not checked: no throughput mapping", evidence)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            prom = Prometheus(session, prometheus)
            results = {k: await prom.query(q, now) for k, q in qs.items()}
            evidence["mappings"] = await check_mappings(prom, mappings, now)
            found = next((m for m in mappings if results[f"throughput:{m.name}"] and results[f"baseline:{m.name}"]), None)
            ranges: dict[str, list[tuple[dict[str, str], list[Any]]]] = {}
            if found is not None:
                rq = range_queries(namespace, workload, found, rules)
                evidence["range_queries"] = rq
                ranges = {k: await prom.query_range(q, now - LOOKBACK, now, STEP) for k, q in rq.items()}
    except PrometheusError as exc:  # one sentence; the rest of the diagnosis goes on
        evidence.update(error=str(exc), failed_query=exc.query)
        return _layer("unknown", f"not checked: {exc}", evidence)
    if found is None:
        present = [m.name for m in mappings if results[f"throughput:{m.name}"]]
        why = (f"{', '.join(present)} has no baseline yet (the job's first {OFFSET})" if present else
               "no throughput series for this job (" + ", ".join(f"{m.name}: {evidence['mappings'][m.name]}" for m in mappings) + ")")
        return _layer("unknown", why, evidence)
    value = lambda key: results[key][0][1] if results[key] else None  # noqa: E731
    now_tp, base_tp = value(f"throughput:{found.name}"), value(f"baseline:{found.name}")
    tp_ratio = now_tp / base_tp if now_tp is not None and base_tp else None
    gpus = {(labels.get("node", ""), labels.get("gpu", "")): v for labels, v in results["nvlink_gpu_ratio"]}
    worst = min(gpus.items(), key=lambda kv: kv[1]) if gpus else None
    # the rules' records: a series per event or signal that holds (alerts/generate.py training_rules)
    events = tuple(sorted({labels.get("event", "") for labels, _ in results["scheduling_events"]}))
    counts = {labels.get("signal", ""): int(v) for labels, v in results["hardware_signals"]}
    signals = tuple(sorted(counts))
    ev = Evidence(tp_ratio, value("interconnect_ratio"), events, signals, running)
    decided = verdict(ev)
    tp_since = down_since(ranges["throughput_ratio"][0][1], RATIO) if ranges.get("throughput_ratio") else None
    evidence.update(throughput={"metric": found.name, "unit": found.unit, "now": now_tp, "baseline": base_tp,
                                "ratio": tp_ratio, "down_since": tp_since},
                    interconnect_ratio=ev.interconnect_ratio, nvlink_gpu_ratio={f"{n}/{g}": r for (n, g), r in sorted(gpus.items())},
                    scheduling_events=list(events), hardware_signals=counts, verdict=decided)
    text = f"{found.name} {_pct_below(tp_ratio)} its previous hour"
    if decided == "ok":
        return _layer("ok", f"{found.name} at {tp_ratio:.0%} of its previous hour", evidence)
    text += f" since {_clock(tp_since)}"
    if worst is not None and worst[1] < INTERCONNECT_RATIO:
        node, gpu = worst[0]
        series = next((v for labels, v in ranges.get("nvlink_gpu_ratio", []) if (labels.get("node"), labels.get("gpu")) == (node, gpu)), None)
        nv_since = down_since(series, INTERCONNECT_RATIO) if series else None
        text += f"; NVLink on gpu {gpu} of node {node} down {1 - worst[1]:.0%} since {_clock(nv_since)}"
    if ev.interconnect_ratio is not None and (worst is None or worst[1] >= INTERCONNECT_RATIO):
        text += f"; the job's interconnect traffic at {ev.interconnect_ratio:.0%} of its previous hour"
    if events:
        text += "; " + ", ".join(events) + f" in the last {WINDOW}"
    if signals:
        text += "; " + ", ".join(f"{s} ({counts[s]} GPU{'s' if counts[s] != 1 else ''})" if s not in ("hardware_label_mismatch",)
                                 else s for s in signals)
    text += f": {decided}" if decided else ": cause unknown (no interconnect measured, or a move with healthy links)"
    return _layer("blocking" if decided else "unknown", text, evidence)


def _pct_below(ratio: float | None) -> str:
    return f"{1 - ratio:.0%} below" if ratio is not None else "?"


def _layer(status: str, summary: str, evidence: dict[str, Any]) -> dict[str, Any]:
    return {"name": "training", "status": status, "summary": summary, "evidence": evidence}
