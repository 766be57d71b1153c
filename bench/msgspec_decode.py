"""Benchmark: a Workload LIST read through the typed path (msgspec) against orjson and the dict parser.

Run: ``.venv/bin/python bench/msgspec_decode.py [--workloads N]``. Prints one table.

The pages are the benchmark cluster's Workloads (bench/cluster.py) in LISTs of 500, as the
informer pages them. Measured in CPU time, best of 3 over every page, the cyclic garbage
collector off (the collector keeps it off during its first sync, exporter/cluster/main.py):

* dicts: ``orjson.loads`` of the page, then :func:`exporter.cluster.workloads.parse_workload`
  of each item (the tolerant parser: every field's type checked in Python, problems collected);
* typed: what the collector does, :func:`exporter.kube.typed.page_decoder` (the page's envelope,
  then each item on its own into :class:`exporter.cluster.workload_doc.WorkloadDoc`), then
  :func:`exporter.cluster.workload_doc.read_workload` of each document;
* ``orjson.loads`` alone, the floor bench/collector.py compares the sync with;
* the digest of each object (exporter.cluster.unchanged) on either path;
* one object of a wrong type per page: how many objects each path keeps (the typed path hands
  that one to the dict parser, which counts its problem).

Both paths make equal records (tests/test_workload_doc.py); this says what the typed one costs.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from exporter.cluster.unchanged import digest  # noqa: E402
from exporter.cluster.workload_doc import WorkloadDoc, read_workload  # noqa: E402
from exporter.cluster.workloads import parse_workload  # noqa: E402
from exporter.kube.typed import page_decoder  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import build_cluster  # noqa: E402
from collector import print_table  # noqa: E402

PAGE = 500
GPUS = ("nvidia.com/gpu",)


def best(fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(3):
        gc.collect()
        gc.disable()
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
        gc.enable()
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=int, default=20_000)
    a = p.parse_args()
    items = build_cluster(a.workloads, 16_384).workloads
    pages = [orjson.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "metadata": {},
                           "items": items[i:i + PAGE]}) for i in range(0, len(items), PAGE)]
    bad = [orjson.dumps({"kind": "WorkloadList", "metadata": {}, "items": [
        *items[i:i + PAGE - 1], {**items[i], "spec": {**items[i]["spec"], "priority": "high"}}]})
        for i in range(0, len(items), PAGE)]
    decode = page_decoder(WorkloadDoc)

    def dicts(source: list[bytes]) -> list[Any]:
        return [parse_workload(obj, GPUS) for page in source for obj in orjson.loads(page)["items"]]

    def typed(source: list[bytes]) -> list[Any]:
        return [read_workload(doc, GPUS) for page in source for doc in decode(page)["items"]]

    objs = [obj for page in pages for obj in orjson.loads(page)["items"]]
    docs = [doc for page in pages for doc in decode(page)["items"]]

    t_floor = best(lambda: [orjson.loads(page) for page in pages])
    t_typed_decode = best(lambda: [decode(page) for page in pages])
    t_dicts, t_typed = best(lambda: dicts(pages)), best(lambda: typed(pages))
    t_dict_digest = best(lambda: [digest(obj) for obj in objs])
    t_doc_digest = best(lambda: [digest(doc) for doc in docs])
    kept_dicts = sum(not w.problems for w in dicts(bad))
    kept_typed = sum(not w.problems for w in typed(bad))
    n = len(items)
    print_table([
        ("Workloads / pages of 500", f"{n} / {len(pages)} ({sum(map(len, pages)) / 1e6:.1f} MB)"),
        ("dicts: orjson.loads + parse_workload", f"{t_dicts:.2f} CPU-s ({t_dicts / n * 1e6:.0f} us/Workload)"),
        ("typed: page_decoder + read_workload (the collector's path)",
         f"{t_typed:.2f} CPU-s ({t_typed / n * 1e6:.0f} us/Workload; {t_dicts / t_typed:.2f}x faster)"),
        ("  decode alone: orjson.loads (the floor) / typed", f"{t_floor:.2f} / {t_typed_decode:.2f} CPU-s"),
        ("  parse alone: parse_workload / read_workload",
         f"{t_dicts - t_floor:.2f} / {t_typed - t_typed_decode:.2f} CPU-s"),
        ("digest of each object: of the dict / of the document", f"{t_dict_digest:.2f} / {t_doc_digest:.2f} CPU-s"),
        ("one bad object per page: records without a problem",
         f"dicts: {kept_dicts} of {n}; typed: {kept_typed} of {n} (the bad one read by parse_workload, its problem counted)"),
        ("load average (1 min) at the end", f"{os.getloadavg()[0]:.1f}"),
    ])


if __name__ == "__main__":
    main()
