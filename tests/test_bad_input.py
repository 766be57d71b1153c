"""Bad input: mutated and random objects thrown at every parser and handler (hypothesis, bounded),
extreme sizes, hostile label values, colliding topology label names, and the cardinality guard.

The properties:
- a parser either returns a record or raises ``ParseError``; nothing else (the handlers'
  catch-all for parser bugs, logged as ``parse_failed``/``handler_failed``, is never reached);
- an object with a wrong-typed field the parser reads, or without a name, is counted in
  ``gangscope_parse_errors_total{source}``;
- the exposition always parses with prometheus_client's text and OpenMetrics parsers;
- any label value (quotes, backslashes, newlines, control characters, any unicode) comes back
  from both parsers exactly as it went in.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text
from structlog.testing import capture_logs

from exporter import cli
from exporter.cluster import jobs as jb
from exporter.cluster import podgroups as pg
from exporter.cluster.pods import parse_pod
from exporter.cluster.collector import build_collector
from exporter.cluster.clusterqueues import parse_cluster_queue, parse_cohort
from exporter.cluster.localqueues import parse_local_queue
from exporter.cluster.nodes import parse_node
from exporter.cluster.workloads import parse_workload
from exporter.exposition import Exposition
from exporter.fields import ParseError
from exporter.health import SourceHealth
from exporter.topologies import parse_resource_flavor, parse_topology
from exporter.sim.apiserver import SimApiServer
from kueue_objects import (
    BLOCK, HOST, RACK, admitted_conditions, cluster_queue, cond, fixture, local_queue, node, topology, workload,
)
from test_faults_api import StartCollector, converges, scrape, start_collector  # noqa: F401 (fixture)

BUG_EVENTS = {"parse_failed", "handler_failed", "podgroup_handler_failed", "kube_handler_failed", "pod_handler_failed",
              "record_handler_failed", "pod_listener_failed"}
PODGROUP_FIXTURES = Path(__file__).parent / "fixtures" / "podgroups"


# ----- seeds: realistic objects of every kind and API version ----------------------------------


def resource_flavor() -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "tas"},
            "spec": {"topologyName": "default", "nodeLabels": {"pool": "h100"}}}


def podgroup_seeds() -> list[tuple[str, dict]]:
    out = []
    for name in ("coscheduling.yaml", "volcano.yaml", "native.yaml"):
        for obj in yaml.safe_load((PODGROUP_FIXTURES / name).read_text())["items"]:
            source = pg.source_of(obj)
            if source is not None:
                out.append((source, obj))
    return out


def gang_and_job_seeds() -> list[tuple[str, dict]]:
    """KAI, composite and 1.36+ native objects as real systems and Kubernetes' goldens print them,
    JobSets and TrainJobs printed by real clusters, a LeaderWorkerSet and pods of every API."""
    from test_gang_evidence import objects, pod
    from test_jobs import lws, trainjob

    out: list[tuple[str, dict]] = [("podgroups_kai", o) for f in ("kai-01-podgroup-gb200-eks-unschedulable-list.yaml",)
                                   for o in objects(f)]
    out += [("podgroups_kai", o) for o in objects("kai-04-example-external-podgroup-subgroups-topology.yaml") if o["kind"] == "PodGroup"]
    out += [("compositepodgroups_native", o) for o in objects("k8s-09-golden-v1alpha3-CompositePodGroup.yaml")]
    out += [("workloads_native", o) for o in objects("k8s-07-golden-v1beta1-Workload.yaml")]
    out += [("jobsets", o) for o in objects("jobset-02-kueue8101-trainjob-child-list.yaml")]
    out += [("trainjobs", trainjob(45, 1787220000.0)), ("leaderworkersets", lws(2))]
    out += [("pods_kueue", pod("w-0", labels={"kueue.x-k8s.io/podset": "main", "jobset.sigs.k8s.io/jobset-name": "js"},
                               annotations={"pod-group-name": "g", "kueue.x-k8s.io/workload": "wl"}))]
    return out


SEEDS: list[tuple[str, dict]] = [
    *[("workloads", o) for f in ("workload-v1beta1-admitted-tas.yaml", "workload-v1beta2-admitted-tas.yaml",
                                 "workload-v1beta2-tas-node-failure.yaml") for o in fixture(f)],
    ("workloads", workload("b2", hosts=["h1", "h2"], conditions=admitted_conditions(), unhealthy=["h2"],
                           evictions=[{"reason": "NodeFailures", "underlyingCause": "", "count": 1}])),
    ("workloads", workload("b1", version="v1beta1", hosts=["h1"], conditions=admitted_conditions(ready=False))),
    ("localqueues", local_queue("q", "team", "cq")),
    ("topologies", topology()),
    ("resourceflavors", resource_flavor()),
    ("nodes", node("h1", "b1", "r1")),
    ("clusterqueues", cluster_queue("cq", ("tas", "spot"), cohort="org", stop_policy="Hold", reserved=8, used=8)),
    ("cohorts", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "org"},
                 "spec": {"parentName": "root", "fairSharing": {"weight": "2"}}}),
    *podgroup_seeds(),
    *gang_and_job_seeds(),
]
SOURCES = sorted({s for s, _ in SEEDS})
assert {"podgroups_coscheduling", "podgroups_coscheduling_legacy", "podgroups_volcano", "podgroups_native",
        "workloads_native"} <= set(SOURCES)

PARSERS: dict[str, Any] = {
    "workloads": parse_workload, "localqueues": parse_local_queue, "topologies": parse_topology,
    "resourceflavors": parse_resource_flavor, "nodes": parse_node,
    "clusterqueues": parse_cluster_queue, "cohorts": parse_cohort,
    **{s: (lambda s: lambda o: pg.PARSERS[s](s, o))(s) for s in pg.PARSERS},
    **jb.PARSERS, "pods_kueue": lambda o: parse_pod(o, ("nvidia.com/gpu",)),
}

# ----- strategies -----------------------------------------------------------------------------

leaves = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64)
          | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
          | st.sampled_from(["", "8", "500m", "1e3", "True", "2026-08-20T10:00:00Z", "kubernetes.io/hostname"]))
json_values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=10)


def paths(obj: Any, prefix: tuple = ()) -> Iterator[tuple]:
    """Every location in a decoded object (the root included)."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from paths(v, (*prefix, i))


def put(obj: Any, path: tuple, value: Any, delete: bool = False) -> Any:
    if not path:
        return value
    parent = obj
    for step in path[:-1]:
        parent = parent[step]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return obj


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, Any]:
    """A seed with one to four locations replaced by random JSON, emptied, deleted or blown up."""
    source, seed = draw(st.sampled_from(SEEDS))
    obj: Any = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(list(paths(obj))))
        op = draw(st.sampled_from(["random", "random", "empty", "delete", "huge"]))
        if op == "delete" and path:
            obj = put(obj, path, None, delete=True)
        elif op == "empty":
            obj = put(obj, path, draw(st.sampled_from(["", [], {}, 0])))
        elif op == "huge":  # a long list of copies of whatever is there
            obj = put(obj, path, [copy.deepcopy(_get(obj, path))] * draw(st.integers(50, 400)))
        else:
            obj = put(obj, path, draw(json_values))
    return source, obj


def _get(obj: Any, path: tuple) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def random_object(source: str) -> st.SearchStrategy[tuple[str, Any]]:
    return st.tuples(st.just(source), json_values)


# ----- helpers --------------------------------------------------------------------------------


class Collector:
    """The collector's handlers (as ``gangscope collector`` builds them), each with its health."""

    def __init__(self, **options: Any) -> None:
        self.exposition = Exposition(options.pop("max_series_per_family", 0))
        self.store, self.handlers, self.gangs = build_collector(self.exposition, **options)
        self.health = {name: SourceHealth(name, self.exposition) for name in self.handlers}
        for name, handler in self.handlers.items():
            handler.health = self.health[name]

    def parse_errors(self, source: str) -> int:
        return self.health[source].parse_errors

    def render_both(self) -> tuple[list, list]:
        """Both formats, each parsed in full (a parse failure fails the test)."""
        text = list(parse_text(self.exposition.render(False).decode()))
        om = list(parse_openmetrics(self.exposition.render(True).decode()))
        return text, om


def bug_events(logs: list[dict]) -> list[dict]:
    return [e for e in logs if e.get("event") in BUG_EVENTS]


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ----- properties -----------------------------------------------------------------------------


@FAST
@given(item=mutated() | st.sampled_from(SOURCES).flatmap(random_object))
def test_parsers_return_a_record_or_raise_parse_error(item: tuple[str, Any]) -> None:
    source, obj = item
    try:
        PARSERS[source](obj)
    except ParseError:
        pass


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(items=st.lists(mutated(), min_size=1, max_size=8), deletes=st.lists(st.integers(0, 7), max_size=3))
def test_handlers_survive_mutated_objects_and_the_exposition_parses(items: list[tuple[str, Any]], deletes: list[int]) -> None:
    c = Collector()
    with capture_logs() as logs:
        for source, obj in items:
            c.handlers[source].apply("ADDED", obj)
            c.handlers[source].apply("MODIFIED", obj)
        for i in deletes:
            if i < len(items):
                source, obj = items[i]
                c.handlers[source].apply("DELETED", obj)
        by_source: dict[str, list] = {}
        for source, obj in items:
            by_source.setdefault(source, []).append(obj)
        for source, objs in by_source.items():  # a relist with the same objects
            c.handlers[source].replace(objs)
    assert not bug_events(logs), bug_events(logs)[:2]
    c.render_both()


def wrong_for(kind: str) -> st.SearchStrategy[Any]:
    """Values of any type but ``kind`` (and not null: an absent field is not an error)."""
    if kind == "map":  # map[string]string: not an object, or an object with a non-string value
        return (st.integers() | st.text(max_size=5) | st.lists(st.integers(), max_size=2)
                | st.dictionaries(st.text(min_size=1, max_size=5), st.integers() | st.lists(st.none()), min_size=1, max_size=3))
    if kind == "time":
        return st.sampled_from(["yesterday", "2026-13-45T99:00:00Z", "20 Aug 2026"])
    if kind == "name":  # present but unusable as a name
        return st.sampled_from(["", 7, None, ["w"]])
    wrong = {
        "str": st.integers() | st.booleans() | st.floats() | st.lists(st.integers(), max_size=2) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        "int": st.text(max_size=5) | st.floats() | st.booleans() | st.lists(st.integers(), max_size=2),
        "bool": st.integers() | st.text(max_size=5) | st.lists(st.booleans(), max_size=2),
        "list": st.integers() | st.text(max_size=5) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        "dict": st.integers() | st.text(max_size=5) | st.lists(st.integers(), max_size=2),
    }
    return wrong[kind]


V1B2 = workload("bad", hosts=["h1", "h2"], conditions=admitted_conditions(),
                evictions=[{"reason": "Preempted", "underlyingCause": "", "count": 1}])
V1B1 = workload("bad1", version="v1beta1", hosts=["h1"], conditions=admitted_conditions())
COSCHED = next(o for s, o in SEEDS if s == "podgroups_coscheduling")
VOLCANO = next(o for s, o in SEEDS if s == "podgroups_volcano")
NATIVE = next(o for s, o in SEEDS if s == "podgroups_native")
KAI = next(o for s, o in SEEDS if s == "podgroups_kai")
COMPOSITE = next(o for s, o in SEEDS if s == "compositepodgroups_native")
JOBSET = next(o for s, o in SEEDS if s == "jobsets")
TRAINJOB = next(o for s, o in SEEDS if s == "trainjobs")
LWS = next(o for s, o in SEEDS if s == "leaderworkersets")
POD = next(o for s, o in SEEDS if s == "pods_kueue")
# (source, seed, location of a field the parser reads, what it must be)
READ_FIELDS = [
    ("workloads", V1B2, ("metadata", "name"), "name"),
    ("workloads", V1B2, ("metadata", "labels"), "map"),
    ("workloads", V1B2, ("metadata", "creationTimestamp"), "time"),
    ("workloads", V1B2, ("spec",), "dict"),
    ("workloads", V1B2, ("spec", "queueName"), "str"),
    ("workloads", V1B2, ("spec", "active"), "bool"),
    ("workloads", V1B2, ("spec", "podSets"), "list"),
    ("workloads", V1B2, ("spec", "podSets", 0, "count"), "int"),
    ("workloads", V1B2, ("spec", "priorityClassRef", "name"), "str"),
    ("workloads", V1B1, ("spec", "priorityClassName"), "str"),
    ("workloads", V1B2, ("status", "conditions"), "list"),
    ("workloads", V1B2, ("status", "conditions", 0, "lastTransitionTime"), "time"),
    ("workloads", V1B2, ("status", "admission"), "dict"),
    ("workloads", V1B2, ("status", "admission", "podSetAssignments", 0, "topologyAssignment", "slices"), "list"),
    ("workloads", V1B1, ("status", "admission", "podSetAssignments", 0, "topologyAssignment", "domains", 0, "count"), "int"),
    ("workloads", V1B2, ("status", "schedulingStats", "evictions", 0, "count"), "int"),
    ("localqueues", local_queue("q", "team", "cq"), ("spec", "clusterQueue"), "str"),
    ("topologies", topology(), ("metadata", "name"), "name"),
    ("topologies", topology(), ("spec", "levels"), "list"),
    ("topologies", topology(), ("spec", "levels", 0, "nodeLabel"), "str"),
    ("resourceflavors", resource_flavor(), ("spec", "nodeLabels"), "map"),
    ("nodes", node("h1", "b1", "r1"), ("metadata", "labels"), "map"),
    ("nodes", node("h1", "b1", "r1"), ("metadata", "name"), "name"),
    ("podgroups_coscheduling", COSCHED, ("spec", "minMember"), "int"),
    ("podgroups_coscheduling", COSCHED, ("metadata", "name"), "name"),
    ("podgroups_volcano", VOLCANO, ("status", "phase"), "str"),
    ("podgroups_volcano", VOLCANO, ("spec", "queue"), "str"),
    ("podgroups_native", NATIVE, ("spec", "schedulingPolicy"), "dict"),
    ("podgroups_kai", KAI, ("spec", "minMember"), "int"),
    ("podgroups_kai", KAI, ("spec", "queue"), "str"),
    ("podgroups_kai", KAI, ("status", "schedulingConditions"), "list"),
    ("podgroups_kai", KAI, ("status", "schedulingConditions", 0, "reasons", 0, "reason"), "str"),
    ("compositepodgroups_native", COMPOSITE, ("spec", "parentCompositePodGroupName"), "str"),
    ("compositepodgroups_native", COMPOSITE, ("spec", "schedulingPolicy", "gang", "minGroupCount"), "int"),
    ("jobsets", JOBSET, ("status", "restarts"), "int"),
    ("jobsets", JOBSET, ("status", "replicatedJobsStatus"), "list"),
    ("trainjobs", TRAINJOB, ("status", "trainerStatus", "progressPercentage"), "int"),
    ("trainjobs", TRAINJOB, ("status", "trainerStatus", "lastUpdatedTime"), "time"),
    ("leaderworkersets", LWS, ("status", "readyReplicas"), "int"),
    ("pods_kueue", POD, ("metadata", "annotations", "pod-group-name"), "str"),
    ("pods_kueue", POD, ("spec", "schedulingGroup"), "dict"),
    ("pods_kueue", POD, ("metadata", "name"), "name"),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(READ_FIELDS).flatmap(lambda c: st.tuples(st.just(c), wrong_for(c[3]))))
def test_each_bad_object_is_counted(case: tuple[tuple[str, dict, tuple, str], Any]) -> None:
    (source, seed, path, _), value = case
    obj = put(copy.deepcopy(seed), path, value)
    c = Collector()
    c.handlers["nodes"].apply("ADDED", node("h1", "b1", "r1"))
    with capture_logs() as logs:
        c.handlers[source].apply("ADDED", obj)
    assert c.parse_errors(source) >= 1, (path, value)
    assert not bug_events(logs)
    text, _ = c.render_both()
    errors = {s.labels["source"]: s.value for f in text for s in f.samples if s.name == "gangscope_parse_errors_total"}
    assert errors[source] == c.parse_errors(source)


@pytest.mark.parametrize("bad", [5, ["2026-08-20T10:00:00Z"], True], ids=["int", "list", "bool"])
def test_a_bad_condition_is_counted_on_every_object_that_has_it(bad: Any) -> None:
    """Regression (found by the property above at 3,000 examples): parsed conditions are shared
    between Workloads; one with a wrong-typed lastTransitionTime was shared as if clean, so the
    next Workload with it was not counted, and an unhashable value escaped the parser."""
    c = Collector()
    with capture_logs() as logs:
        for name in ("one", "two", "three"):
            c.handlers["workloads"].apply("ADDED", workload(name, conditions=[
                {"type": "Admitted", "status": "True", "reason": "R", "message": "", "lastTransitionTime": bad}]))
    assert not bug_events(logs)
    assert c.parse_errors("workloads") == 3 and len(c.store.workloads) == 3


# ----- sizes ----------------------------------------------------------------------------------


def with_roots(n: int, domain_count: int | None = None, counts: list[int] | None = None) -> dict:
    wl = workload("wide", hosts=["h0"], conditions=admitted_conditions())
    sl = wl["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"][0]
    sl["domainCount"] = n if domain_count is None else domain_count
    sl["valuesPerLevel"] = [{"individual": {"prefix": "node-", "roots": [str(i) for i in range(n)]}}]
    if counts is not None:
        sl["podCounts"] = {"individual": counts}
    wl["spec"]["podSets"][0]["count"] = n
    return wl


def test_100000_roots_are_exported() -> None:
    c = Collector()
    t0 = time.process_time()  # CPU seconds of this process: a loaded machine does not move it
    c.handlers["workloads"].apply("ADDED", with_roots(100_000))
    elapsed = time.process_time() - t0
    assert c.parse_errors("workloads") == 0
    assert c.exposition.series_count("gangscope_workload_topology_pods") == 100_000
    # a guard against work quadratic in the domains (hours at this size), not a speed target
    assert elapsed < 60, f"{elapsed:.1f} CPU s for one Workload of 100,000 domains"
    c.handlers["workloads"].apply("DELETED", with_roots(1))
    assert c.exposition.series_count("gangscope_workload_topology_pods") == 0


@pytest.mark.parametrize("wl", [
    with_roots(100_000, domain_count=99_999),  # roots longer than domainCount
    with_roots(100_000, counts=[1] * 99_999),  # podCounts.individual shorter than the roots
    with_roots(3, domain_count=-1),
], ids=["roots-vs-domainCount", "podCounts-vs-roots", "negative-domainCount"])
def test_mismatched_slices_are_counted_and_the_workload_kept(wl: dict) -> None:
    c = Collector()
    with capture_logs() as logs:
        c.handlers["workloads"].apply("ADDED", wl)
    assert c.parse_errors("workloads") == 1 and not bug_events(logs)
    assert c.exposition.series_count("gangscope_workload_topology_pods") == 0  # no half-expanded topology
    assert c.exposition.series_count("gangscope_workload_info") == 1  # the rest of the Workload is exported
    c.render_both()


def test_huge_lists_empty_strings_and_unicode() -> None:
    c = Collector()
    many = workload("many", conditions=[cond(f"Type{i}", "True", f"R{i}") for i in range(10_000)])
    many["spec"]["podSets"] = [dict(many["spec"]["podSets"][0], name=f"ps{i}") for i in range(5_000)]
    empty = workload("empty", queue="", priority="", conditions=[cond("", "", "")], hosts=[])
    unicode = workload("ジョブ-🚀", ns="équipe", queue="очередь", conditions=[cond("Admitted", "True", "理由\u2028")])
    nameless = workload("")
    with capture_logs() as logs:
        for obj in (many, empty, unicode, nameless):
            c.handlers["workloads"].apply("ADDED", obj)
    assert not bug_events(logs)
    assert c.exposition.series_count("gangscope_workload_condition") == 10_000 + 1  # "" type skipped and counted
    assert c.parse_errors("workloads") == 2  # the condition without a type, the Workload without a name
    assert set(c.store.workloads) == {("team", "many"), ("team", "empty"), ("équipe", "ジョブ-🚀")}
    text, om = c.render_both()
    assert any(s.labels.get("workload") == "ジョブ-🚀" for f in om for s in f.samples)
    assert c.exposition.series_count("gangscope_workload_requested_gpus") == 3


# ----- label values ---------------------------------------------------------------------------

label_text = st.text(min_size=1, max_size=20)


@settings(max_examples=100, deadline=None)
@given(ns=label_text, name=label_text, queue=st.text(max_size=20), reason=st.text(max_size=20),
       owner=st.text(max_size=20), block=st.text(max_size=20), host=label_text)
def test_any_label_value_round_trips(ns: str, name: str, queue: str, reason: str, owner: str, block: str, host: str) -> None:
    c = Collector()
    c.handlers["topologies"].apply("ADDED", topology())
    c.handlers["nodes"].apply("ADDED", node("n1", block, "r1", hostname=host))
    wl = workload(name, ns, queue=queue, hosts=[host], conditions=[cond("Admitted", "True", reason)])
    wl["metadata"]["ownerReferences"][0]["name"] = owner
    with capture_logs() as logs:
        c.handlers["workloads"].apply("ADDED", wl)
    assert not bug_events(logs) and c.parse_errors("workloads") == 0
    for families in c.render_both():
        got = {s.name: s.labels for f in families for s in f.samples if "workload" in s.labels}
        assert got["gangscope_workload_info"] == {
            "namespace": ns, "workload": name, "cluster_queue": "cq", "local_queue": queue, "priority_class": "high",
            "owner_kind": "Job", "owner_name": owner, "worker_cluster": "", "nominated_worker_clusters": ""}
        assert got["gangscope_workload_condition"] == {"namespace": ns, "workload": name, "type": "Admitted",
                                                       "status": "True", "reason": reason}
        assert got["gangscope_workload_topology_pods"] == {"namespace": ns, "workload": name, "podset": "main",
                                                           "block": block, "rack": "r1", "host": host}


NASTY = 'q"uote \\back\\slash\nnew\rline\ttab\x00nul\x01\x1f\x7f \u2028\u0085 ünï日本🚀 \\n \\"'


async def test_hostile_label_values_round_trip_through_the_running_collector(
        start_collector: StartCollector, kube_sim: SimApiServer) -> None:
    wl = workload("hostile", queue=NASTY, hosts=["h1"], conditions=[*admitted_conditions(), cond("Note", "True", NASTY)])
    wl["metadata"]["ownerReferences"][0]["name"] = NASTY
    kube_sim.create(wl)
    kube_sim.update(node("h1", NASTY, "r1"))
    collector = await start_collector()
    await converges(collector, kube_sim)
    for openmetrics, parse in ((False, parse_text), (True, parse_openmetrics)):
        samples = [s for f in parse(await scrape(collector.port, openmetrics)) for s in f.samples
                   if s.labels.get("workload") == "hostile"]
        info = next(s.labels for s in samples if s.name == "gangscope_workload_info")
        assert info["local_queue"] == NASTY and info["owner_name"] == NASTY
        assert {s.labels["reason"] for s in samples if s.name == "gangscope_workload_condition"} >= {NASTY}
        assert next(s.labels for s in samples if s.name == "gangscope_workload_topology_pods")["block"] == NASTY


# ----- topology label names -------------------------------------------------------------------


@pytest.mark.parametrize("command", [["collector"], ["agent", "--nvml", "sim"], ["snapshot", "--from-file", "x.yaml"]])
def test_colliding_topology_flags_are_a_startup_error_naming_both_keys(command: list[str], capsys: pytest.CaptureFixture) -> None:
    code = cli.main([*command, "--topology-levels", "a/topology-rack,b/rack",
                     "--topology-alias", "a/topology-rack=pod_rack", "--topology-alias", "b/rack=pod_rack"])
    err = capsys.readouterr().err
    assert code == 2
    assert "a/topology-rack" in err and "b/rack" in err and "--topology-alias" in err


@pytest.mark.parametrize("command", [["collector"], ["agent", "--nvml", "sim"], ["snapshot", "--from-file", "x.yaml"]])
def test_reserved_alias_flag_is_a_startup_error_saying_what_is_allowed(command: list[str], capsys: pytest.CaptureFixture) -> None:
    code = cli.main([*command, "--topology-alias", "a/topology-rack=node"])
    err = capsys.readouterr().err
    assert code == 2
    assert "'node' is a label gangscope already puts on its series; allowed: a name matching" in err


def test_colliding_topologies_at_run_time_keep_the_levels_and_are_counted() -> None:
    """Decided behaviour: a Topology whose levels would give two keys one label name (only
    ``--topology-alias`` overrides can: the automatic names never collide) cannot be applied; the
    collector keeps the levels it had (series keep their labels), counts a parse error on
    ``topologies``, logs both keys, and adopts the levels once the Topology is fixed."""
    c = Collector(alias_overrides={"a.example/topology-rack": "pod_rack", RACK: "pod_rack"})
    c.handlers["topologies"].apply("ADDED", topology(levels=(BLOCK, HOST)))
    c.handlers["nodes"].apply("ADDED", node("h1", "b1", "r1"))
    c.handlers["workloads"].apply("ADDED", workload("w", hosts=["h1"], conditions=admitted_conditions()))
    before = c.exposition.render(False)
    with capture_logs() as logs:
        c.handlers["topologies"].apply("ADDED", topology("other", levels=("a.example/topology-rack", RACK, HOST)))
    assert c.parse_errors("topologies") == 1 and not bug_events(logs)
    detail = " ".join(str(e.get("detail")) for e in logs if e.get("event") == "object_parse_problems")
    assert "a.example/topology-rack" in detail and RACK in detail
    assert c.store.levels.keys == (BLOCK, HOST)
    after = c.exposition.render(False)
    strip = lambda b: b.replace(b"gangscope_parse_errors_total{source=\"topologies\"} 1", b"").replace(  # noqa: E731
        b"gangscope_parse_errors_total{source=\"topologies\"} 0", b"")
    assert strip(after) == strip(before), "nothing relabelled"
    c.render_both()
    # Fixed: the renamed level is adopted and every series relabelled.
    c.handlers["topologies"].apply("MODIFIED", topology("other", levels=("a.example/topology-zone", RACK, HOST)))
    assert c.store.levels.aliases == ("block", "zone", "pod_rack", "host")
    text, _ = c.render_both()
    pods = [s.labels for f in text for s in f.samples if s.name == "gangscope_workload_topology_pods"]
    assert pods and all("zone" in p for p in pods)


# ----- cardinality guard ----------------------------------------------------------------------


async def test_series_limit_drops_counts_and_warns_once(start_collector: StartCollector, kube_sim: SimApiServer) -> None:
    for i in range(36):  # one stage series each (the current stage): more Workloads than the cap
        kube_sim.create(workload(f"extra-{i}", hosts=["h1"], conditions=admitted_conditions()))
    with capture_logs() as logs:
        collector = await start_collector("--max-series-per-family", "30")
        kube_sim.update(workload("extra-0", hosts=["h2"], conditions=admitted_conditions(ready=False)))
        for i in range(36, 39):
            kube_sim.create(workload(f"extra-{i}", admitted_cq=None))
        deadline = time.monotonic() + 30
        while collector.store.workload("team", "extra-38") is None:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        text = await scrape(collector.port)
        om = await scrape(collector.port, openmetrics=True)
    samples = [s for f in parse_text(text) for s in f.samples]
    assert list(parse_openmetrics(om))
    stage = [s for s in samples if s.name == "gangscope_workload_stage"]
    held = len(collector.store.workloads)
    assert held > 30 and 0 < len(stage) <= 30
    dropped = {s.labels["family"]: s.value for s in samples if s.name == "gangscope_exposition_dropped_series_total"}
    assert dropped["gangscope_workload_stage"] >= held - 30
    conditions: dict[tuple[str, str], int] = {}
    for s in samples:
        if s.name == "gangscope_workload_condition":
            key = (s.labels["namespace"], s.labels["workload"])
            conditions[key] = conditions.get(key, 0) + 1
    assert conditions and dropped["gangscope_workload_condition"] > 0
    assert all(n == len(collector.store.workloads[k].conditions) for k, n in conditions.items()), \
        "whole Workloads dropped, never half of one"
    warnings = [e for e in logs if e.get("event") == "series_limit_reached"]
    assert [e["family"] for e in warnings].count("gangscope_workload_stage") == 1, "warned once, not per event"
    assert all(e["log_level"] == "warning" and e["limit"] == 30 for e in warnings)
    assert len({e["family"] for e in warnings}) == len(warnings)
    # the health series stay complete: each family has its own budget
    # every watched source (27: the 7 pod sources, ClusterQueues, Cohorts, the 2 Ray sources and Volcano's queues included)
    # and queue_positions polled
    assert len([s for s in samples if s.name == "gangscope_source_up"]) == len(collector.sources.sources) + 1 == 28
