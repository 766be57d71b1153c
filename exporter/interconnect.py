"""explain's interconnect layer: a job's NVLink and PCIe throughput, read from Prometheus.

Three parts, kept apart so that each can be tested on its own: the PromQL (pure strings; every
one of them runs against Debian's real Prometheus in tests/test_interconnect.py), a small client
of Prometheus's ``/api/v1/query`` that turns every way it can fail into one sentence, and the
judgement (a pure function of the numbers): is the job's throughput now below half of its
baseline? Which GPU lags the gang's median (a straggler slows every collective) is the
GangscopeGPUStraggler alert's condition, asked in its own expression: the GPUs explain names are
the ones the alert pages for.

The queries ask for one family at a time: ``rate()`` drops the metric name, so a rate over a
``{__name__=~"a|b"}`` selector leaves the transmit and receive series of one link with the same
label set and Prometheus refuses it ("vector cannot contain metrics with the same labelset").
Each family is summed per GPU first, and the two sums are added.

The baseline is the job's first hour when Prometheus holds it, else the first hour (or less) of
whatever history it holds for the job; the layer says which.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from .rule_queries import Rules, for_workload

FAMILIES: dict[str, tuple[str, str]] = {
    "nvlink": ("gangscope_nvlink_transmit_bytes_total", "gangscope_nvlink_receive_bytes_total"),
    "pcie": ("gangscope_pcie_transmit_bytes_total", "gangscope_pcie_receive_bytes_total"),
}
# Below this fraction of its baseline, the job's throughput on an interconnect counts as degraded.
DEGRADED_RATIO = 0.5
# Stragglers are what the GangscopeGPUStraggler alert's condition names (one GPU's NVLink below
# half of its gang's median, the median busy enough to tell, the gang running), asked in its own
# expression (exporter/rule_queries.py), so explain names the GPUs the alert pages for.
STRAGGLER_ALERT = "GangscopeGPUStraggler"
NOW_WINDOW = 300  # seconds of the "now" rate
BASELINE_WINDOW = 3600  # the first hour
MIN_WINDOW = 30  # less history than this: too few scrapes for a rate
MAX_LOOKBACK = 30 * 86400  # how far back the history query looks for the job's first sample


def _label(value: str) -> str:
    """A PromQL string literal (Kubernetes names hold no quotes, but a dump may)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def job_gpus(namespace: str, workload: str, at: int | None = None) -> str:
    """The job's GPUs as (node, gpu) pairs of value 1, from the agents' pod-resources join."""
    mod = f" @ {at}" if at is not None else ""
    return (f"max by (node, gpu) (gangscope_gpu_pod_info{{namespace={_label(namespace)}, "
            f"workload={_label(workload)}}}{mod})")


def gpu_rate_query(kind: str, namespace: str, workload: str, window: int, at: int | None = None) -> str:
    """Bytes per second per GPU of the job on ``kind`` (transmit plus receive), over ``window``
    seconds ending now or at ``at`` (the ``@`` modifier). One series per GPU: labels node, gpu."""
    mod = f" @ {at}" if at is not None else ""
    tx, rx = FAMILIES[kind]
    return (f"(sum by (node, gpu) (rate({tx}[{window}s]{mod})) + sum by (node, gpu) (rate({rx}[{window}s]{mod})))"
            f" * on (node, gpu) {job_gpus(namespace, workload, at)}")


def history_query(namespace: str, workload: str, lookback: int) -> str:
    """The timestamp of the job's earliest GPU sample Prometheus holds within ``lookback`` seconds
    (a subquery of at most 10,000 steps, within Prometheus's 11,000 points per series)."""
    step = max(1, -(-lookback // 10000))
    sel = f"gangscope_gpu_pod_info{{namespace={_label(namespace)}, workload={_label(workload)}}}"
    return f"min(min_over_time(timestamp({sel})[{lookback}s:{step}s]))"


def printed_queries(namespace: str, workload: str, start: float | None, now: float) -> dict[str, str]:
    """What to run by hand without ``--prometheus``: per-GPU throughput now and over the first hour."""
    out = {}
    for kind in FAMILIES:
        out[f"{kind}_now"] = gpu_rate_query(kind, namespace, workload, NOW_WINDOW)
        if start is not None:
            window = int(min(BASELINE_WINDOW, max(NOW_WINDOW, now - start)))
            out[f"{kind}_first_hour"] = gpu_rate_query(kind, namespace, workload, window, int(start + window))
    return out


# ---- the client ---------------------------------------------------------------------------------

class PrometheusError(Exception):
    """A query that gave no answer; the message is one sentence for the user, ``query`` the PromQL."""

    def __init__(self, message: str, query: str | None = None) -> None:
        super().__init__(message)
        self.query = query


Sample = tuple[dict[str, str], float]


class Prometheus:
    """Instant queries over ``/api/v1/query`` (the same on Prometheus 2.x and 3.x, and on what
    speaks its API: Thanos, Mimir, VictoriaMetrics), with the version named when one fails."""

    def __init__(self, session: Any, base: str) -> None:
        self.session, self.base = session, base.rstrip("/")

    async def query(self, expr: str, at: float) -> list[Sample]:
        data = await self._get("query", {"query": expr, "time": f"{at:.3f}"}, expr, "vector")
        return [(s.get("metric") or {}, float(s["value"][1])) for s in data.get("result") or []]

    async def query_range(self, expr: str, start: float, end: float, step: float) -> list[tuple[dict[str, str], list[Any]]]:
        """``/api/v1/query_range``: per series its labels and ``[time, value]`` points."""
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        data = await self._get("query_range", params, expr, "matrix")
        return [(s.get("metric") or {}, s.get("values") or []) for s in data.get("result") or []]

    async def _get(self, api: str, params: dict[str, str], expr: str, want: str) -> dict[str, Any]:
        """One API call; every way it can fail is one sentence (:class:`PrometheusError`). POSTed as
        a form, as Grafana does: the training layer's queries (the rules' expressions inlined) run to
        several KiB, past what a proxy in front of Prometheus takes in a URL (nginx: 8 KiB)."""
        import aiohttp

        url = f"{self.base}/api/v1/{api}"
        try:
            async with self.session.post(url, data=params) as resp:
                status, ctype, raw = resp.status, resp.content_type, await resp.read()
        except aiohttp.ClientConnectorError as exc:
            raise PrometheusError(f"cannot reach Prometheus at {self.base}: {exc.os_error.strerror or exc.os_error}; "
                                  "check the URL and that Prometheus is running") from None
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise PrometheusError(f"no answer from Prometheus at {self.base}: {type(exc).__name__} {exc}".rstrip()) from None
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict) or body.get("status") not in ("success", "error"):
            raise PrometheusError(f"{url} answered HTTP {status} ({ctype or 'no content type'}), not Prometheus's query "
                                  "API: give the server's base URL (such as http://prometheus:9090, plus any "
                                  "--web.route-prefix)")
        if body["status"] == "error":
            version = await self.version()
            hint = ""
            if "@ modifier is disabled" in str(body.get("error")):
                hint = "; Prometheus before 2.33 needs --enable-feature=promql-at-modifier"
            raise PrometheusError(f"Prometheus{' ' + version if version else ''} at {self.base} refused a query "
                                  f"(HTTP {status}, {body.get('errorType') or 'error'}: {body.get('error')}){hint}", expr)
        data = body.get("data") or {}
        if data.get("resultType") != want:
            raise PrometheusError(f"Prometheus at {self.base} answered a {data.get('resultType')!r}, not a {want}", expr)
        return data

    async def version(self) -> str | None:
        """The server's version from ``/api/v1/status/buildinfo``, or None (old or not Prometheus)."""
        try:
            async with self.session.get(f"{self.base}/api/v1/status/buildinfo") as resp:
                body = orjson.loads(await resp.read())
            return str(body["data"]["version"])
        except Exception:
            return None


# ---- the judgement ----------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuRate:
    node: str
    gpu: str
    bytes_per_second: float


@dataclass(frozen=True)
class Baseline:
    """The window the job's throughput now is compared with."""
    start: float  # its first second
    end: float  # its last (the @ time)
    first_hour: bool  # the job's own first hour (else: the earliest history Prometheus holds)


@dataclass(frozen=True)
class KindVerdict:
    kind: str
    now: float  # bytes/s of the whole job
    baseline: float | None
    ratio: float | None
    median: float
    stragglers: tuple[tuple[GpuRate, float], ...]  # (GPU, its share of the median), slowest first

    @property
    def degraded(self) -> bool:
        return self.ratio is not None and self.ratio < DEGRADED_RATIO


def judge(kind: str, now: list[GpuRate], baseline: list[GpuRate] | None, stragglers: Sequence[GpuRate] = ()) -> KindVerdict:
    """The job's throughput now against its baseline; ``stragglers``, the GPUs the
    GangscopeGPUStraggler alert's condition names (NVLink: the rule decides, this shows it)."""
    total = sum(g.bytes_per_second for g in now)
    base = sum(g.bytes_per_second for g in baseline) if baseline else None
    median = statistics.median(g.bytes_per_second for g in now) if now else 0.0
    slow = sorted(((g, g.bytes_per_second / median if median else 0.0) for g in stragglers),
                  key=lambda x: (x[1], x[0].node, x[0].gpu))
    return KindVerdict(kind, total, base, total / base if base else None, median, tuple(slow))


def _ts(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _span(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def _rates(samples: list[Sample]) -> list[GpuRate]:
    return sorted((GpuRate(m.get("node", ""), m.get("gpu", ""), v) for m, v in samples), key=lambda g: (g.node, g.gpu))


def verdict_text(verdicts: list[KindVerdict], baseline: Baseline, start: float | None) -> str:
    """One paragraph: each interconnect now against the baseline, the stragglers, what the baseline is."""
    parts = []
    for v in verdicts:
        text = f"{v.kind} {v.now / 1e9:.2f} GB/s now"
        if v.baseline is not None and v.ratio is not None:
            text += f" vs {v.baseline / 1e9:.2f} GB/s baseline ({v.ratio:.0%})"
        for g, share in v.stragglers:
            text += (f"; GPU {g.gpu} on node {g.node} lags at {share:.0%} of the gang's median GPU "
                     f"({g.bytes_per_second / 1e9:.2f} vs {v.median / 1e9:.2f} GB/s)")
        parts.append(text)
    window = _span(baseline.end - baseline.start)
    if baseline.first_hour:
        where = f"baseline: the job's first {window} (from {_ts(baseline.start)})"
    else:
        since = f"; the job runs since {_ts(start)}" if start is not None else ""
        where = f"baseline: the first {window} of the history Prometheus holds for the job (from {_ts(baseline.start)}{since})"
    return "; ".join(parts) + f". {where}"


async def assess(url: str, namespace: str, workload: str, start: float | None, now: float,
                 session: Any = None, gpus: int | None = None, rules: Rules | None = None) -> tuple[str, str, dict[str, Any]]:
    """(status, summary, evidence) of the interconnect layer for the Workload ``namespace/workload``
    that runs since ``start`` on ``gpus`` GPUs (None: not known); raises :class:`PrometheusError`.

    Fewer GPUs reporting than the job holds (an agent not scraped, a node lost) cannot rule out a
    straggler or a drop among the others: an "ok" from them becomes "unknown", saying how many
    report; a problem found among those that do report stands."""
    import aiohttp

    if session is None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as own:
            return await assess(url, namespace, workload, start, now, own, gpus, rules)
    prom = Prometheus(session, url)
    lookback = int(min(MAX_LOOKBACK, max(BASELINE_WINDOW, now - start if start is not None else 0)))
    queries = {"history": history_query(namespace, workload, lookback)}
    evidence: dict[str, Any] = {"queries": queries}
    first = await prom.query(queries["history"], now)
    if not first:
        return "unknown", (f"Prometheus holds no gangscope_gpu_pod_info series for {namespace}/{workload} in the last "
                           f"{_span(lookback)}: the gangscope agent is not scraped, or the job's pods hold no GPUs"), evidence
    held = first[0][1]
    evidence["history_since"] = _ts(held)
    if now - held < MIN_WINDOW:
        return "unknown", (f"Prometheus holds only {int(now - held)}s of this job's GPU series (since {_ts(held)}): "
                           f"ask again in a minute"), evidence
    base_from = max(start, held) if start is not None else held
    base = Baseline(base_from, min(now, base_from + BASELINE_WINDOW), start is not None and held - start <= MIN_WINDOW)
    window_now = int(min(NOW_WINDOW, now - held))
    window_base = max(MIN_WINDOW, int(base.end - base.start))
    verdicts = []
    reporting: dict[str, int] = {}
    queries["nvlink_stragglers"] = for_workload((rules or Rules.load()).alert(STRAGGLER_ALERT), namespace, workload)
    for kind in FAMILIES:
        queries[f"{kind}_now"] = gpu_rate_query(kind, namespace, workload, window_now)
        queries[f"{kind}_baseline"] = gpu_rate_query(kind, namespace, workload, window_base, int(base.end))
        cur = _rates(await prom.query(queries[f"{kind}_now"], now))
        if not cur:
            continue
        reporting[kind] = len(cur)
        slow = _rates(await prom.query(queries["nvlink_stragglers"], now)) if kind == "nvlink" else []
        verdicts.append(judge(kind, cur, _rates(await prom.query(queries[f"{kind}_baseline"], now)), slow))
    evidence["baseline"] = {"from": _ts(base.start), "to": _ts(base.end), "first_hour": base.first_hour}
    evidence["gpus"] = {"held": gpus, "reporting": reporting}
    evidence["values_bytes_per_second"] = {f"{v.kind}_{w}": x for v in verdicts
                                           for w, x in (("now", v.now), ("baseline", v.baseline))}
    evidence["ratio_now_to_baseline"] = {v.kind: v.ratio for v in verdicts if v.ratio is not None}
    evidence["stragglers"] = [{"interconnect": v.kind, "node": g.node, "gpu": g.gpu, "bytes_per_second": g.bytes_per_second,
                               "gang_median_bytes_per_second": v.median, "share_of_median": share}
                              for v in verdicts for g, share in v.stragglers]
    if not verdicts:
        return "unknown", (f"no NVLink/PCIe counters for the GPUs of {namespace}/{workload} (the agent reads none, "
                           "or the job's GPUs moved no data)"), evidence
    text = verdict_text(verdicts, base, start)
    missing = {k: n for k, n in reporting.items() if gpus is not None and n < gpus}
    if missing:
        text += "; " + ", ".join(f"{k}: {n} of the job's {gpus} GPUs report" for k, n in missing.items())
    if any(v.degraded for v in verdicts):
        return "blocking", "degraded: " + text, evidence
    if any(v.stragglers for v in verdicts):
        return "blocking", "straggler: " + text, evidence
    if missing:  # the silent GPUs may be the slow ones
        return "unknown", "incomplete: " + text, evidence
    return "ok", text, evidence


def shown_queries(evidence: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(what, PromQL) for the text output to print on lines of their own: every query when
    Prometheus was not asked, the one it refused when it refused one."""
    if evidence.get("prometheus") is None:
        return [(key.replace("_", " ", 1).replace("_", " "), q) for key, q in (evidence.get("queries") or {}).items()]
    failed = evidence.get("failed_query")
    return [("the refused query", failed)] if failed else []
