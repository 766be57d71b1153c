"""explain's training layer: is the job itself slower, and is it scheduling, hardware or the job?

The verdict of the ``gangscope-training.rules`` recording rules (alerts/generate.py
``training_rules``) for one Workload, asked in the rules' own expressions: :mod:`.rule_queries`
inlines each recorded series from the rules file (the one the package ships, or ``--rules``, the
file a user's Prometheus loads, generated from their ``config.yaml`` with their throughput
mappings and thresholds), so the answer is the rules' on any Prometheus that scrapes the jobs and
gangscope, with or without the rules loaded, and over history recorded before they were. The
rules decide (``namespace_workload:gangscope_job_slowdown:ratio``: scheduling, hardware,
workload); this layer renders that decision with the evidence the rules read (the throughput now
and its baseline, the interconnect ratio, the scheduling events and hardware signals, and to name
it the GPU whose NVLink fell most) and never decides again. Every query is in the layer's
evidence, so a user can run it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from .interconnect import Prometheus, PrometheusError
from .rule_queries import Rules, for_workload

log = structlog.get_logger(__name__)

# the rules' records (alerts/generate.py): the rate window is part of the per-GPU record's name
THROUGHPUT = "namespace_workload:gangscope_job_throughput:rate"
BASELINE = "namespace_workload:gangscope_job_throughput:baseline"
RATIO = "namespace_workload:gangscope_job_throughput:ratio"
VERDICT = "namespace_workload:gangscope_job_slowdown:ratio"
MAPPING_SERIES = "mapping:gangscope_job_throughput_series:count"
SCHEDULING_EVENTS = "namespace_workload:gangscope_job_scheduling_events:count"
HARDWARE_SIGNALS = "namespace_workload:gangscope_job_hardware_signals:count"
INTERCONNECT = "namespace_workload:gangscope_interconnect_bytes:ratio"
GPU_NVLINK = "namespace_workload_gpu:gangscope_nvlink_bytes:rate"
STEP = 60  # seconds between the points of the "since when" range queries
LOOKBACK = 7200  # how far back "since when" looks


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rules", type=Path, action="append", default=[], metavar="FILE",
                   help="a rules file your Prometheus loads (repeatable: alerts/generate.py's gangscope-rules.yaml and "
                        "gangscope-alerts.yaml, from your config.yaml): the training and interconnect layers ask their "
                        "verdicts, thresholds and windows (default: the rules of the shipped config.yaml, installed "
                        "with gangscope)")


@dataclass(frozen=True)
class Windows:
    """What the rules compare, read from their expressions (for the text and the per-GPU view)."""

    ratio: float  # the throughput ratio below which a job is slow
    interconnect_ratio: float
    min_interconnect: float  # bytes per second of baseline for the interconnect ratio to count
    baseline: str  # the baseline's range, e.g. 1h
    when: str  # the baseline's modifier as the rules write it: ``offset 15m``, or the demo's ``@ <time>``
    window: str  # the events' and signals' window, e.g. 30m

    @property
    def offset(self) -> str:
        """How long before now the baseline ends, e.g. 15m; empty where it ends at a fixed time."""
        return self.when.removeprefix("offset").strip() if self.when.startswith("offset") else ""

    @classmethod
    def of(cls, rules: Rules) -> Windows:
        verdicts = " ".join(r.expr for r in rules.records.get(VERDICT, []))
        baseline = " ".join(r.expr for r in rules.records.get(BASELINE, []))
        inter = " ".join(r.expr for r in rules.records.get(INTERCONNECT, []))
        events = " ".join(r.expr for r in rules.records.get(SCHEDULING_EVENTS, []))
        num = r"([0-9.]+(?:e[+-]?[0-9]+)?)"
        ratio = re.search(re.escape(RATIO) + r"\s*<\s*" + num, verdicts)
        iratio = re.search(r"\(" + re.escape(INTERCONNECT) + r"\)\s*<\s*" + num, verdicts)
        window = re.search(r"\[(\w+)\]\s*(offset\s+\w+|@\s*[0-9.]+)", baseline)
        floor = re.search(r">\s*" + num + r"\)\s*$", inter.split("\n")[-1] if inter else "")
        ev = re.search(r"max_over_time\([^\[]*\[(\w+)\]", events)
        if not (ratio and iratio and window and ev):
            raise ValueError("the rules file has no training verdicts (alerts/generate.py training_rules): "
                             "is it gangscope's recording rules, with config.yaml's training section?")
        return cls(float(ratio.group(1)), float(iratio.group(1)), float(floor.group(1)) if floor else 0.0,
                   window.group(1), window.group(2), ev.group(1))


def queries(namespace: str, workload: str, rules: Rules) -> dict[str, str]:
    """Every instant query of the layer, by name (the evidence prints them)."""
    w = Windows.of(rules)
    one = lambda expr: for_workload(rules.inline(expr), namespace, workload)  # noqa: E731
    gpu = rules.named(GPU_NVLINK)
    return {
        # the rules' decision, and what it read (alerts/generate.py training_rules)
        "verdict": one(VERDICT),
        "throughput": one(THROUGHPUT),
        "baseline": one(BASELINE),
        "ratio": one(RATIO),
        "interconnect_ratio": one(f"min by (namespace, workload) ({INTERCONNECT})"),
        "scheduling_events": one(SCHEDULING_EVENTS),
        "hardware_signals": one(HARDWARE_SIGNALS),
        # each GPU's own NVLink traffic (both directions) against its previous hour, to name the worst
        "nvlink_gpu_ratio": one(f"{gpu} / (avg_over_time({gpu}[{w.baseline}] {w.when}) > {w.min_interconnect:g})"),
    }


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


async def _no_series(prom: Prometheus, rules: Rules, now: float) -> str:
    """Why no mapping gives this job a throughput: per mapped metric, its series in Prometheus,
    those joined to no Workload and those whose job stopped reporting (the rules' own count,
    ``mapping:gangscope_job_throughput_series:count``)."""
    counts: dict[str, dict[str, int]] = {}
    for labels, v in await prom.query(rules.record(MAPPING_SERIES), now):
        counts.setdefault(labels.get("metric", "?"), {})[labels.get("state", "?")] = int(v)
    parts = []
    for metric, c in counts.items():
        present, unjoined, stale = c.get("present", 0), c.get("unjoined", 0), c.get("stale")
        stale_text = "" if stale is None else f", {stale} of jobs that stopped reporting"
        parts.append(f"{metric}: no series in Prometheus" if not present else
                     f"{metric}: {present} series, {unjoined} joined to no Workload{stale_text}, none current for this one")
        if not present or unjoined:
            log.info("throughput_mapping_problem", metric=metric, series=present, unjoined=unjoined)
    return "no throughput series for this job (" + ("; ".join(parts) or "the rules map no throughput metric") + ")"


async def training_layer(namespace: str, workload: str, running: bool, prometheus: str | None, now: float,
                         rules: Rules | None = None) -> dict[str, Any]:
    """The explain layer dict (name, status, summary, evidence). ``running``: the Workload's stage,
    as the rules read it from gangscope_workload_stage (for the evidence only: the rules decide)."""
    import aiohttp

    rules = rules or Rules.load()
    w = Windows.of(rules)
    qs = queries(namespace, workload, rules)
    evidence: dict[str, Any] = {"prometheus": prometheus, "queries": qs}
    if prometheus is None:
        return _layer("unknown", f"not checked: run with --prometheus URL, or query {qs['ratio']}", evidence)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            prom = Prometheus(session, prometheus)
            results = {k: await prom.query(q, now) for k, q in qs.items()}
            by_metric = {k: {labels.get("metric", ""): v for labels, v in results[k]} for k in ("throughput", "baseline", "ratio")}
            # the first mapping (in the rules' order) with a ratio; else the first with a throughput
            order = [dict(r.labels).get("metric", "") for r in rules.records.get(THROUGHPUT, [])]
            metric = next((m for m in order if m in by_metric["ratio"]), next((m for m in order if m in by_metric["throughput"]), None))
            if metric is None:
                return _layer("unknown", await _no_series(prom, rules, now), evidence)
            ranges: dict[str, list[tuple[dict[str, str], list[Any]]]] = {}
            if metric in by_metric["ratio"]:
                rq = {"ratio": qs["ratio"], "nvlink_gpu_ratio": qs["nvlink_gpu_ratio"]}
                evidence["range_queries"] = rq
                ranges = {k: await prom.query_range(q, now - LOOKBACK, now, STEP) for k, q in rq.items()}
    except PrometheusError as exc:  # one sentence; the rest of the diagnosis goes on
        evidence.update(error=str(exc), failed_query=exc.query)
        return _layer("unknown", f"not checked: {exc}", evidence)
    now_tp, base_tp, ratio = by_metric["throughput"].get(metric), by_metric["baseline"].get(metric), by_metric["ratio"].get(metric)
    if ratio is None:
        return _layer("unknown", f"{metric} has no baseline yet (the job's first {w.offset})" if w.offset
                      else f"{metric} has no baseline yet (its baseline window, {w.when}, is before the job's start)", evidence)
    decided = next((labels.get("verdict") for labels, _ in results["verdict"] if labels.get("metric") == metric), None)
    if decided is None and ratio >= w.ratio:
        decided = "ok"
    gpus = {(labels.get("node", ""), labels.get("gpu", "")): v for labels, v in results["nvlink_gpu_ratio"]}
    worst = min(gpus.items(), key=lambda kv: kv[1]) if gpus else None
    events = tuple(sorted({labels.get("event", "") for labels, _ in results["scheduling_events"]}))
    counts = {labels.get("signal", ""): int(v) for labels, v in results["hardware_signals"]}
    interconnect = results["interconnect_ratio"][0][1] if results["interconnect_ratio"] else None
    tp_series = next((v for labels, v in ranges.get("ratio", []) if labels.get("metric") == metric), None)
    tp_since = down_since(tp_series, w.ratio) if tp_series else None
    evidence.update(throughput={"metric": metric, "unit": next((labels.get("unit") for labels, _ in results["throughput"]
                                                                if labels.get("metric") == metric), None),
                                "now": now_tp, "baseline": base_tp, "ratio": ratio, "down_since": tp_since},
                    interconnect_ratio=interconnect, nvlink_gpu_ratio={f"{n}/{g}": r for (n, g), r in sorted(gpus.items())},
                    scheduling_events=list(events), hardware_signals=counts, running=running, verdict=decided)
    if decided == "ok":
        return _layer("ok", f"{metric} at {ratio:.0%} of its baseline", evidence)
    text = f"{metric} {1 - ratio:.0%} below its baseline since {_clock(tp_since)}"
    if worst is not None and worst[1] < w.interconnect_ratio:
        node, gpu = worst[0]
        series = next((v for labels, v in ranges.get("nvlink_gpu_ratio", []) if (labels.get("node"), labels.get("gpu")) == (node, gpu)), None)
        nv_since = down_since(series, w.interconnect_ratio) if series else None
        text += f"; NVLink on gpu {gpu} of node {node} down {1 - worst[1]:.0%} since {_clock(nv_since)}"
    if interconnect is not None and (worst is None or worst[1] >= w.interconnect_ratio):
        text += f"; the job's interconnect traffic at {interconnect:.0%} of its baseline"
    if events:
        text += "; " + ", ".join(events) + f" in the last {w.window}"
    if counts:
        text += "; " + ", ".join(f"{s} ({n})" for s, n in sorted(counts.items()))
    text += f": {decided}" if decided else ": cause unknown (no interconnect measured, a move with healthy links, or not running)"
    return _layer("blocking" if decided else "unknown", text, evidence)


def _layer(status: str, summary: str, evidence: dict[str, Any]) -> dict[str, Any]:
    return {"name": "training", "status": status, "summary": summary, "evidence": evidence}
