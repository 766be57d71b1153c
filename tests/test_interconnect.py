"""explain's interconnect layer against Debian's real Prometheus holding known samples.

Every query exporter/interconnect.py builds (the history lookup, the per-GPU rates now and at the
baseline, and the queries explain prints for running by hand) runs on the real PromQL engine here,
and the numbers it answers are asserted exactly: each counter grows at a fixed rate, so every rate
over it is that rate.

The TSDB holds four jobs, each on GPUs of its own nodes:
- ml-team/job-llama-1: 2 nodes x 4 GPUs for 2 h, 2 NVLinks per GPU at 5 GB/s each way and PCIe
  2 + 1 GB/s, except GPU 3 of n2 at 30% of that: a straggler, steady since the start;
- research/job-t5-1: 1 node x 2 GPUs, 20 GB/s of NVLink per GPU for 90 minutes, then 4 GB/s; no
  PCIe counters at all;
- ml-team/job-fresh-1: running for 3 h, but Prometheus holds only its last 2 minutes;
- ml-team/job-newborn-1: 15 s of samples.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from exporter import interconnect
from realprom import AVAILABLE, GPU_FAMILIES, gpu_samples, openmetrics, prometheus_with, stage_samples

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not AVAILABLE, reason="needs Debian's prometheus and promtool (scripts/setup-env)")]

STEP = 15
T0 = 1_790_000_040  # "now" of every query: a multiple of the step, 2026-09-21
S = T0 - 7200  # when llama and t5 started running
LINK = 5e9  # NVLink bytes/s per link and direction


def samples() -> Iterator[tuple[str, dict[str, str], float, float]]:
    def share(node: str, g: int) -> float:
        return 0.3 if (node, g) == ("n2", 3) else 1.0

    for node in ("n1", "n2"):
        yield from gpu_samples("ml-team", "job-llama-1", node, 4, S - 300, T0, lambda g, t, n=node: LINK * share(n, g),
                               (lambda g, t, n=node: 2e9 * share(n, g), lambda g, t, n=node: 1e9 * share(n, g)))
    yield from gpu_samples("research", "job-t5-1", "n3", 2, S - 300, T0, lambda g, t: 5e9 if t <= S + 5400 else 1e9, None)
    yield from gpu_samples("ml-team", "job-fresh-1", "n4", 2, T0 - 120, T0, lambda g, t: LINK, (lambda g, t: 1e9,) * 2)
    yield from gpu_samples("ml-team", "job-newborn-1", "n5", 1, T0 - 15, T0, lambda g, t: LINK, (lambda g, t: 1e9,) * 2)
    # the collector's stage of each Workload (the straggler alert's condition reads it)
    for namespace, workload, first in (("ml-team", "job-llama-1", S - 300), ("research", "job-t5-1", S - 300),
                                       ("ml-team", "job-fresh-1", T0 - 120), ("ml-team", "job-newborn-1", T0 - 15)):
        yield from stage_samples(namespace, workload, first, T0)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with prometheus_with(tmp_path_factory.mktemp("prometheus"), openmetrics(GPU_FAMILIES, samples())) as url:
        yield url


async def query(url: str, expr: str) -> dict[tuple[str, str], float]:
    async with aiohttp.ClientSession() as session:
        found = await interconnect.Prometheus(session, url).query(expr, T0)
    return {(m.get("node", ""), m.get("gpu", "")): v for m, v in found}


async def test_a_steady_job_with_a_lagging_gpu_is_named_a_straggler(prometheus: str) -> None:
    status, summary, ev = await interconnect.assess(prometheus, "ml-team", "job-llama-1", S, T0)
    assert status == "blocking"
    nvlink = 7 * 4 * LINK + 0.3 * 4 * LINK  # 2 links x 2 directions per GPU
    pcie = 7 * 3e9 + 0.3 * 3e9
    assert ev["values_bytes_per_second"] == {"nvlink_now": pytest.approx(nvlink), "nvlink_baseline": pytest.approx(nvlink),
                                             "pcie_now": pytest.approx(pcie), "pcie_baseline": pytest.approx(pcie)}
    assert ev["ratio_now_to_baseline"] == {"nvlink": pytest.approx(1.0), "pcie": pytest.approx(1.0)}
    # the GangscopeGPUStraggler alert's condition names the GPU (NVLink: the rules judge no PCIe straggler)
    assert [(s["interconnect"], s["node"], s["gpu"], round(s["share_of_median"], 6)) for s in ev["stragglers"]] == [
        ("nvlink", "n2", "3", 0.3)]
    assert ev["baseline"] == {"from": "2026-09-21T12:14:00Z", "to": "2026-09-21T13:14:00Z", "first_hour": True}
    assert ev["history_since"] == "2026-09-21T12:14:00Z"
    assert summary == (
        "straggler: nvlink 146.00 GB/s now vs 146.00 GB/s baseline (100%); GPU 3 on node n2 lags at 30% of the gang's "
        "median GPU (6.00 vs 20.00 GB/s); pcie 21.90 GB/s now vs 21.90 GB/s baseline (100%). baseline: the job's first "
        "60m (from 2026-09-21T12:14:00Z)")


async def test_a_job_slower_than_its_first_hour_is_degraded(prometheus: str) -> None:
    status, summary, ev = await interconnect.assess(prometheus, "research", "job-t5-1", S, T0)
    assert status == "blocking" and summary.startswith("degraded: nvlink 8.00 GB/s now vs 40.00 GB/s baseline (20%). baseline")
    assert ev["ratio_now_to_baseline"] == {"nvlink": pytest.approx(0.2)}  # no PCIe counters: no PCIe verdict
    assert ev["stragglers"] == []


async def test_a_short_history_gives_a_baseline_from_what_prometheus_holds(prometheus: str) -> None:
    status, summary, ev = await interconnect.assess(prometheus, "ml-team", "job-fresh-1", T0 - 10800, T0)
    assert status == "ok"
    assert ev["history_since"] == "2026-09-21T14:12:00Z"
    assert ev["baseline"] == {"from": "2026-09-21T14:12:00Z", "to": "2026-09-21T14:14:00Z", "first_hour": False}
    assert ev["values_bytes_per_second"]["nvlink_now"] == pytest.approx(2 * 4 * LINK)
    assert summary.endswith("baseline: the first 2m of the history Prometheus holds for the job "
                            "(from 2026-09-21T14:12:00Z; the job runs since 2026-09-21T11:14:00Z)")
    assert "120s]" in ev["queries"]["nvlink_now"]  # a 5m rate over 2m of samples would read 2/5 of the truth


async def test_too_little_history_and_no_series_say_so(prometheus: str) -> None:
    status, summary, _ = await interconnect.assess(prometheus, "ml-team", "job-newborn-1", T0 - 15, T0)
    assert (status, summary) == ("unknown", "Prometheus holds only 15s of this job's GPU series (since "
                                            "2026-09-21T14:13:45Z): ask again in a minute")
    status, summary, _ = await interconnect.assess(prometheus, "ml-team", "ghost", S, T0)
    assert status == "unknown" and summary.startswith("Prometheus holds no gangscope_gpu_pod_info series for ml-team/ghost")


async def test_the_printed_queries_answer_per_gpu_rates(prometheus: str) -> None:
    printed = interconnect.printed_queries("research", "job-t5-1", S, T0)
    assert sorted(printed) == ["nvlink_first_hour", "nvlink_now", "pcie_first_hour", "pcie_now"]
    assert await query(prometheus, printed["nvlink_now"]) == {("n3", "0"): pytest.approx(4e9), ("n3", "1"): pytest.approx(4e9)}
    assert await query(prometheus, printed["nvlink_first_hour"]) == {("n3", "0"): pytest.approx(2e10), ("n3", "1"): pytest.approx(2e10)}
    assert await query(prometheus, printed["pcie_now"]) == {}
    llama = interconnect.printed_queries("ml-team", "job-llama-1", S, T0)
    pcie = await query(prometheus, llama["pcie_now"])
    assert len(pcie) == 8 and pcie[("n2", "3")] == pytest.approx(9e8) and pcie[("n1", "0")] == pytest.approx(3e9)
    history = await query(prometheus, interconnect.history_query("ml-team", "job-fresh-1", 10800))
    assert history == {("", ""): T0 - 120}


async def test_a_rate_over_both_families_in_one_selector_is_what_prometheus_refuses(prometheus: str) -> None:
    """Why the queries ask for one family at a time; and what the user reads when a query is refused."""
    broken = 'sum(rate({__name__=~"gangscope_nvlink_transmit_bytes_total|gangscope_nvlink_receive_bytes_total"}[5m]))'
    async with aiohttp.ClientSession() as session:
        with pytest.raises(interconnect.PrometheusError) as err:
            await interconnect.Prometheus(session, prometheus).query(broken, T0)
    assert str(err.value) == (f"Prometheus 2.42.0+ds at {prometheus} refused a query (HTTP 422, execution: "
                              "vector cannot contain metrics with the same labelset)")
    assert err.value.query == broken


async def test_not_prometheus_and_unreachable_are_one_sentence(tmp_path: Path) -> None:
    from aiohttp import web

    from exporter.server import bound_port, start_server

    app = web.Application()  # a web server that is not Prometheus: every path a 404 page
    runner = await start_server(app, "127.0.0.1:0")
    url = f"http://127.0.0.1:{bound_port(runner)}"
    try:
        with pytest.raises(interconnect.PrometheusError) as err:
            await interconnect.assess(url, "ml-team", "job-llama-1", S, T0)
    finally:
        await runner.cleanup()
    assert str(err.value) == (f"{url}/api/v1/query answered HTTP 404 (text/plain), not Prometheus's query API: give "
                              "the server's base URL (such as http://prometheus:9090, plus any --web.route-prefix)")
    with pytest.raises(interconnect.PrometheusError) as err:
        await interconnect.assess(url, "ml-team", "job-llama-1", S, T0)  # the server is gone now
    assert str(err.value) == f"cannot reach Prometheus at {url}: Connect call failed ('127.0.0.1', {url.rsplit(':', 1)[1]}); " \
                             "check the URL and that Prometheus is running"


def test_judge_shows_the_stragglers_it_is_given_against_the_gangs_median() -> None:
    """Which GPU straggles is the alert's condition (alerts/tests/stragglers.yaml tests its
    thresholds with promtool); judge gives each its share of the median the text prints."""
    busy = [interconnect.GpuRate("n1", str(g), 1e10 if g else 4.9e9) for g in range(4)]
    v = interconnect.judge("nvlink", busy, None, busy[:1])
    assert [(g.gpu, share) for g, share in v.stragglers] == [("0", pytest.approx(0.49))]
    assert v.ratio is None and not v.degraded
    assert interconnect.judge("nvlink", busy, busy).stragglers == ()


async def test_gpus_that_do_not_report_make_an_ok_unknown_but_keep_a_problem(prometheus: str) -> None:
    """A job on 9 GPUs of which 8 report: the straggler among them stands; a steady job with a
    silent GPU is not called healthy."""
    status, summary, ev = await interconnect.assess(prometheus, "ml-team", "job-llama-1", S, T0, gpus=9)
    assert status == "blocking" and summary.endswith("; nvlink: 8 of the job's 9 GPUs report, pcie: 8 of the job's 9 GPUs report")
    assert ev["gpus"] == {"held": 9, "reporting": {"nvlink": 8, "pcie": 8}}
    status, summary, _ = await interconnect.assess(prometheus, "ml-team", "job-fresh-1", T0 - 10800, T0, gpus=3)
    assert status == "unknown" and summary.startswith("incomplete: nvlink 40.00 GB/s now vs 40.00 GB/s baseline (100%)")
    status, _, _ = await interconnect.assess(prometheus, "ml-team", "job-fresh-1", T0 - 10800, T0, gpus=2)
    assert status == "ok"
