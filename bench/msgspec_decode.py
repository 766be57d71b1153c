"""Benchmark: decoding Workload LIST pages into typed structs (msgspec) against today's orjson + parse.

Run: ``.venv/bin/python bench/msgspec_decode.py [--workloads N]`` (needs ``pip install msgspec``,
which gangscope does not depend on). Prints one table.

The pages are the benchmark cluster's Workloads (bench/cluster.py) in LISTs of 500, as the
informer pages them. Measured in CPU time, best of 3 over every page:

* today: ``orjson.loads`` of the page, then :func:`exporter.cluster.workloads.parse_workload` of
  each item (the record the store keeps: times and quantities converted, problems collected);
* msgspec, the page in one typed decode into structs of the fields ``parse_workload`` reads
  (strings, times and quantities left as the strings they are: a lower bound of that path, the
  conversions still to come); one object of a wrong type fails the whole page there;
* msgspec, each item as ``msgspec.Raw`` and then decoded on its own, so one bad object fails
  only itself (what the collector requires: "one bad object cannot fail its page");
* the same, with one bad object per page: how many objects were recovered.

The cyclic garbage collector runs with the collector's thresholds (``tune_gc``).
"""

# No "from __future__ import annotations": msgspec reads the annotations of the structs defined
# inside structs() at run time, where string annotations of local classes would not resolve.
import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from exporter.cluster.main import tune_gc  # noqa: E402
from exporter.cluster.workloads import parse_workload  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster import build_cluster  # noqa: E402
from collector import print_table  # noqa: E402

try:
    import msgspec
except ImportError:  # the table says so; gangscope itself does not depend on msgspec
    msgspec = None  # type: ignore[assignment]

PAGE = 500


def structs() -> tuple[Any, Any]:
    """The Workload list as msgspec structs of what ``parse_workload`` reads (kueue v1beta2)."""
    S = msgspec.Struct

    class OwnerRef(S, rename="camel"):
        api_version: str = ""
        kind: str = ""
        name: str = ""
        uid: str = ""
        controller: bool = False

    class Meta(S, rename="camel"):
        name: str = ""
        namespace: str = ""
        uid: str = ""
        resource_version: str = ""
        creation_timestamp: str = ""
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        owner_references: list[OwnerRef] = []

    class Resources(S):
        requests: dict[str, str] = {}
        limits: dict[str, str] = {}

    class Container(S):
        name: str = ""
        resources: Resources = msgspec.field(default_factory=Resources)

    class Toleration(S):
        key: str = ""
        operator: str = ""
        value: str = ""
        effect: str = ""

    class PodSpec(S, rename="camel"):
        containers: list[Container] = []
        init_containers: list[Container] = []
        tolerations: list[Toleration] = []
        node_selector: dict[str, str] = {}

    class TemplateMeta(S):
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}

    class Template(S):
        metadata: TemplateMeta = msgspec.field(default_factory=TemplateMeta)
        spec: PodSpec = msgspec.field(default_factory=PodSpec)

    class TopologyRequest(S, rename="camel"):
        required: str = ""
        preferred: str = ""
        unconstrained: bool = False
        pod_index_label: str = ""
        pod_set_group_name: str = ""

    class PodSetSpec(S, rename="camel"):
        name: str = ""
        count: int = 0
        template: Template = msgspec.field(default_factory=Template)
        topology_request: TopologyRequest | None = None

    class PriorityRef(S):
        name: str = ""

    class Spec(S, rename="camel"):
        queue_name: str = ""
        priority: int = 0
        priority_class_ref: PriorityRef | None = None
        active: bool = True
        pod_sets: list[PodSetSpec] = []

    class Condition(S, rename="camel"):
        type: str = ""
        status: str = ""
        reason: str = ""
        message: str = ""
        last_transition_time: str = ""

    class Assignment(S, rename="camel"):
        name: str = ""
        count: int = 0
        flavors: dict[str, str] = {}
        resource_usage: dict[str, str] = {}
        topology_assignment: msgspec.Raw = msgspec.Raw()  # two API forms: parsed by the topology code

    class Admission(S, rename="camel"):
        cluster_queue: str = ""
        pod_set_assignments: list[Assignment] = []

    class Eviction(S, rename="camel"):
        reason: str = ""
        underlying_cause: str = ""
        count: int = 0

    class Stats(S):
        evictions: list[Eviction] = []

    class Status(S, rename="camel"):
        conditions: list[Condition] = []
        admission: Admission | None = None
        scheduling_stats: Stats | None = None
        requeue_state: dict[str, Any] | None = None
        admission_checks: list[dict[str, Any]] = []
        unhealthy_nodes: list[dict[str, str]] = []
        accumulated_past_execution_time_seconds: int | None = None

    class Workload(S, rename="camel"):
        api_version: str = ""
        metadata: Meta = msgspec.field(default_factory=Meta)
        spec: Spec = msgspec.field(default_factory=Spec)
        status: Status = msgspec.field(default_factory=Status)

    class WorkloadList(S):
        items: list[Workload] = []

    class RawList(S):
        items: list[msgspec.Raw] = []

    return Workload, (WorkloadList, RawList)


def best(fn: Any) -> float:
    times = []
    for _ in range(3):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", type=int, default=20_000)
    a = p.parse_args()
    if msgspec is None:
        print("msgspec is not installed: pip install msgspec")
        return
    tune_gc()  # as `gangscope collector` does
    items = build_cluster(a.workloads, 16_384).workloads
    pages = [orjson.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadList", "metadata": {},
                           "items": items[i:i + PAGE]}) for i in range(0, len(items), PAGE)]
    bad = [orjson.dumps({"kind": "WorkloadList", "metadata": {}, "items": [
        *items[i:i + PAGE - 1], {**items[i], "spec": {**items[i]["spec"], "priority": "high"}}]})
        for i in range(0, len(items), PAGE)]
    workload, (workload_list, raw_list) = structs()
    list_decoder, raw_decoder, item_decoder = (msgspec.json.Decoder(workload_list), msgspec.json.Decoder(raw_list),
                                               msgspec.json.Decoder(workload))

    def today() -> None:
        for page in pages:
            for obj in orjson.loads(page)["items"]:
                parse_workload(obj)

    def loads_only() -> None:
        for page in pages:
            orjson.loads(page)

    def typed_pages() -> None:
        for page in pages:
            list_decoder.decode(page)

    def per_item(source: list[bytes]) -> int:
        kept = 0
        for page in source:
            for raw in raw_decoder.decode(page).items:
                try:
                    item_decoder.decode(raw)
                    kept += 1
                except msgspec.ValidationError:
                    pass
        return kept

    t_today, t_floor, t_typed = best(today), best(loads_only), best(typed_pages)
    t_items = best(lambda: per_item(pages))
    recovered = per_item(bad)
    page_fails = 0
    for page in bad:
        try:
            list_decoder.decode(page)
        except msgspec.ValidationError:
            page_fails += 1
    n = len(items)
    print_table([
        ("Workloads / pages of 500", f"{n} / {len(pages)} ({sum(map(len, pages)) / 1e6:.1f} MB)"),
        ("today: orjson.loads + parse_workload", f"{t_today:.2f} CPU-s ({t_today / n * 1e6:.0f} us/Workload)"),
        ("  of which orjson.loads alone (the floor)", f"{t_floor:.2f} CPU-s"),
        ("msgspec, typed decode of each page (no conversions yet)", f"{t_typed:.2f} CPU-s ({t_today / t_typed:.1f}x faster "
                                                                   f"than today, {t_typed / t_floor:.2f}x the floor)"),
        ("msgspec, each item decoded alone (bad object: itself only)", f"{t_items:.2f} CPU-s ({t_today / t_items:.1f}x faster)"),
        ("one bad object per page: pages failed whole / objects kept",
         f"typed pages: {page_fails} of {len(bad)} failed; per item: {recovered} of {n} kept"),
        ("load average (1 min) at the end", f"{os.getloadavg()[0]:.1f}"),
    ])


if __name__ == "__main__":
    main()
