"""Benchmark: what the training layer's rules cost a real Prometheus, and its series per job.

Run: ``.venv/bin/python bench/training_rules.py [--seconds 90]``.

Starts the demo with Debian's Prometheus (the shipped rules with the demo's shortened windows,
every group evaluated each second: the same expressions the cluster runs, over the demo's 30
nodes, ~240 GPUs and ~25 Workloads, with three jobs reporting throughput and a Ray head), waits
``--seconds``, then reads from Prometheus' own API each rule group's last evaluation time
(``/api/v1/rules`` evaluationTime) and the series the training layer adds: the collector's
``gangscope_job_trainer_metric`` and ``gangscope_ray_*`` and the recorded training series per
Workload. Prints one table; the load average beside it (on a shared machine evaluation times move
with it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exporter.demo import Demo  # noqa: E402

COUNTS = {
    "gangscope_job_trainer_metric series": "count(gangscope_job_trainer_metric)",
    "gangscope_ray_* series": 'count({__name__=~"gangscope_ray_.+"})',
    "recorded training series": 'count({__name__=~"namespace_workload:gangscope_(job_|interconnect_bytes).+|mapping:.+|namespace_workload:gangscope_ray_.+"})',
    "Workloads with throughput": "count(count by (namespace, workload) (namespace_workload:gangscope_job_throughput:rate))",
}


async def run(seconds: float) -> list[tuple[str, str]]:
    demo = Demo(with_prometheus=True)
    await demo.start()
    try:
        await asyncio.sleep(seconds)
        base = f"http://{demo.host}:{demo.prometheus_port}"
        rows = []
        async with aiohttp.ClientSession() as s:
            async with s.get(base + "/api/v1/rules") as r:
                groups = (await r.json())["data"]["groups"]
            for g in sorted(groups, key=lambda g: -g["evaluationTime"]):
                rows.append((f"{Path(g['file']).name} {g['name']} ({len(g['rules'])} rules)", f"{g['evaluationTime'] * 1000:.2f} ms"))
            for label, q in COUNTS.items():
                async with s.get(base + "/api/v1/query", params={"query": q}) as r:
                    result = (await r.json())["data"]["result"]
                rows.append((label, result[0]["value"][1] if result else "0"))
        rows.append(("load average (1 min)", f"{os.getloadavg()[0]:.1f}"))
        return rows
    finally:
        await demo.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=90.0)
    rows = asyncio.run(run(p.parse_args().seconds))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
