"""exporter.topology: label aliases, level building, and expansion of both assignment forms.

The expansion vectors are Kueue's own (research-kueue.md §2: the workload_types.go doc example,
the kind-cluster output with an empty root, the conversion test with a suffix).
"""

from __future__ import annotations

import pytest

import itertools

from exporter.topology import (
    HOSTNAME_LABEL, RESERVED_LABELS, AssignmentError, Domain, DomainPaths, TopologyError, TopologyLevels, alias_candidates,
    alias_for, iter_domains, parse_alias_overrides,
)

BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"


@pytest.mark.parametrize(("key", "alias"), [
    ("kubernetes.io/hostname", "host"),
    ("topology.kubernetes.io/rack", "rack"),
    ("cloud.google.com/gce-topology-block", "block"),
    ("cloud.provider.com/topology-rack", "rack"),
    ("topology.kubernetes.io/zone", "zone"),
    ("example.com/Topology-Super-Pod", "topology_super_pod"),  # case-sensitive "topology-" match, then lower-cased
    ("example.com/my-topology-sub.block", "sub_block"),
    ("nvidia.com/gpu.clique", "gpu_clique"),
    ("rack", "rack"),
    ("example.com/9rack", "_9rack"),  # a label name cannot start with a digit
    ("example.com/topology-", "_"),  # nothing left: still a valid label name
    ("a.b/topology-x/topology-y", "y"),
])
def test_alias_rules(key: str, alias: str) -> None:
    assert alias_for(key) == alias


def test_levels_put_hostname_last_and_dedupe() -> None:
    levels = TopologyLevels.build([HOSTNAME_LABEL, BLOCK, RACK, BLOCK])
    assert levels.keys == (BLOCK, RACK, HOSTNAME_LABEL)
    assert levels.aliases == ("block", "rack", "host")
    assert TopologyLevels.build([]).aliases == ("host",)


GKE = ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock",
       "cloud.google.com/gce-topology-host", HOSTNAME_LABEL)


def test_gke_standard_levels_get_distinct_labels_in_any_order() -> None:
    """The GKE TAS topology (kueue-frag-3494 fixture, the KueuePopulator chart) collides on ``host``
    under the short rule: the hostname keeps it, gce-topology-host takes its segment form."""
    for order in itertools.permutations(GKE):
        levels = TopologyLevels.build(order)
        assert dict(zip(levels.keys, levels.aliases)) == {
            GKE[0]: "block", GKE[1]: "subblock", GKE[2]: "gce_topology_host", HOSTNAME_LABEL: "host"}


@pytest.mark.parametrize(("keys", "aliases"), [
    # a short name two keys want goes to the first in sort order; the other takes its next candidate
    (("a.com/topology-rack", "b.com/rack"), ("rack", "b_com_rack", "host")),
    (("b.com/rack", "a.com/topology-rack"), ("b_com_rack", "rack", "host")),
    (("cloud.provider.com/topology-rack", "other.io/topology-rack"), ("rack", "topology_rack", "host")),
    # a reserved short name moves on to the next candidate
    (("example.com/namespace",), ("example_com_namespace", "host")),
    (("example.com/node", "nvidia.com/gpu.clique"), ("example_com_node", "gpu_clique", "host")),
    (("a.b/c", "a-b/c"), ("a_b_c", "c", "host")),
    # every candidate collides: the full form, numbered in key order
    (("x.y/z", "x-y/z", "x_y/z"), ("x_y_z", "z", "x_y_z_2", "host")),
    # a key whose short name is host: the hostname level keeps host
    (("example.com/topology-host",), ("topology_host", "host")),
])
def test_collisions_resolve_deterministically(keys: tuple[str, ...], aliases: tuple[str, ...]) -> None:
    levels = TopologyLevels.build(keys)
    assert levels.aliases == aliases
    assert len(set(levels.aliases)) == len(levels.aliases) and not set(levels.aliases) & RESERVED_LABELS


def test_candidates_of_a_key() -> None:
    assert alias_candidates("cloud.google.com/gce-topology-host") == (
        "host", "gce_topology_host", "cloud_google_com_gce_topology_host")
    assert alias_candidates(HOSTNAME_LABEL) == ("host", "hostname", "kubernetes_io_hostname")


def test_overrides_claim_first_and_colliding_overrides_name_both_keys() -> None:
    levels = TopologyLevels.build(["a.com/topology-rack", "b.com/rack"], {"b.com/rack": "rack"})
    assert levels.aliases == ("topology_rack", "rack", "host")
    with pytest.raises(TopologyError) as exc:
        TopologyLevels.build(["a.com/x", "b.com/y"], {"a.com/x": "rack", "b.com/y": "rack"})
    assert "a.com/x" in str(exc.value) and "b.com/y" in str(exc.value)


def test_reserved_override_says_which_names_are_allowed() -> None:
    assert parse_alias_overrides(["a.com/x=pod_rack"]) == {"a.com/x": "pod_rack"}
    with pytest.raises(TopologyError) as exc:
        parse_alias_overrides(["a.com/x=node"])
    message = str(exc.value)
    assert "'node' is a label gangscope already puts on its series" in message
    assert "allowed: a name matching [a-zA-Z_][a-zA-Z0-9_]* that does not start with __ and is none of: api," in message
    for bad in ("nokey", "=x", "a=1x", "a=has-dash", "a=__x"):
        with pytest.raises(TopologyError):
            parse_alias_overrides([bad])


def test_labels_from_node_fills_missing_with_empty_and_host_with_name() -> None:
    levels = TopologyLevels.build([BLOCK, RACK])
    assert levels.labels_from_node({BLOCK: "b1"}, "n1") == [("block", "b1"), ("rack", ""), ("host", "n1")]


def _domains(a: dict) -> list[tuple[tuple[str, ...], int]]:
    return [(d.values, d.count) for d in iter_domains(a)]


def test_v1beta1_and_v1beta2_doc_example_agree() -> None:
    v1 = {"levels": [BLOCK, RACK], "domains": [{"values": ["block-1", "rack-1"], "count": 4},
                                               {"values": ["block-1", "rack-2"], "count": 2}]}
    v2 = {"levels": [BLOCK, RACK], "slices": [{
        "domainCount": 2,
        "valuesPerLevel": [{"universal": "block-1"}, {"individual": {"prefix": "rack-", "roots": ["1", "2"]}}],
        "podCounts": {"individual": [4, 2]}}]}
    expected = [(("block-1", "rack-1"), 4), (("block-1", "rack-2"), 2)]
    assert _domains(v1) == expected
    assert _domains(v2) == expected


def test_kind_output_with_empty_root() -> None:
    a = {"levels": [HOSTNAME_LABEL], "slices": [{"domainCount": 2, "podCounts": {"individual": [7, 3]},
                                                  "valuesPerLevel": [{"individual": {"prefix": "kind-worker", "roots": ["", "2"]}}]}]}
    assert _domains(a) == [(("kind-worker",), 7), (("kind-worker2",), 3)]


def test_two_slices_suffix_and_universal_count() -> None:
    a = {"levels": ["a", "b"], "slices": [
        {"domainCount": 2, "valuesPerLevel": [{"universal": "a1"}, {"individual": {"prefix": "b", "roots": ["1", "2"]}}],
         "podCounts": {"individual": [10, 20]}},
        {"domainCount": 2, "valuesPerLevel": [{"universal": "a2"}, {"individual": {"roots": ["first", "second"], "suffix": "-in-a2"}}],
         "podCounts": {"universal": 50}},
    ]}
    assert _domains(a) == [(("a1", "b1"), 10), (("a1", "b2"), 20), (("a2", "first-in-a2"), 50), (("a2", "second-in-a2"), 50)]


def test_prefix_and_suffix_together_and_empty_suffix() -> None:
    a = {"levels": [HOSTNAME_LABEL], "slices": [{"domainCount": 3, "podCounts": {"universal": 1},
                                                  "valuesPerLevel": [{"individual": {"prefix": "n-", "suffix": ".x", "roots": ["a", "", "c"]}}]}]}
    assert _domains(a) == [(("n-a.x",), 1), (("n-.x",), 1), (("n-c.x",), 1)]
    b = {"levels": [HOSTNAME_LABEL], "slices": [{"domainCount": 1, "podCounts": {"universal": 2},
                                                  "valuesPerLevel": [{"individual": {"prefix": "n-", "suffix": "", "roots": ["a"]}}]}]}
    assert _domains(b) == [(("n-a",), 2)]


def test_hundred_thousand_roots() -> None:
    n = 100_000
    a = {"levels": [HOSTNAME_LABEL], "slices": [{"domainCount": n, "podCounts": {"universal": 1},
                                                  "valuesPerLevel": [{"individual": {"prefix": "node-", "roots": [str(i) for i in range(n)]}}]}]}
    domains = list(iter_domains(a))
    assert len(domains) == n
    assert domains[0] == Domain(("node-0",), 1) and domains[-1] == Domain((f"node-{n - 1}",), 1)


@pytest.mark.parametrize("bad", [
    {"levels": ["a"], "slices": [{"domainCount": 2, "valuesPerLevel": [{"individual": {"roots": ["x"]}}], "podCounts": {"universal": 1}}]},
    {"levels": ["a"], "slices": [{"domainCount": 2, "valuesPerLevel": [{"universal": "x"}], "podCounts": {"individual": [1]}}]},
    {"levels": ["a", "b"], "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "x"}], "podCounts": {"universal": 1}}]},
    {"levels": ["a"], "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "x", "individual": {"roots": ["y"]}}], "podCounts": {"universal": 1}}]},
    {"levels": ["a"], "slices": [{"domainCount": 1, "valuesPerLevel": [{}], "podCounts": {"universal": 1}}]},
    {"levels": ["a"], "slices": [{"domainCount": 1, "valuesPerLevel": [{"universal": "x"}], "podCounts": {}}]},
    {"levels": ["a"], "slices": [{"domainCount": "1", "valuesPerLevel": [{"universal": "x"}], "podCounts": {"universal": 1}}]},
    {"levels": ["a"], "slices": [{"domainCount": -1, "valuesPerLevel": [{"universal": "x"}], "podCounts": {"universal": 1}}]},
    {"levels": ["a"], "slices": [{"domainCount": 1, "valuesPerLevel": [{"individual": {"roots": [5]}}], "podCounts": {"universal": 1}}]},
    {"levels": ["a"], "slices": [{"domainCount": 1, "valuesPerLevel": [{"individual": {"prefix": 3, "roots": ["x"]}}], "podCounts": {"universal": 1}}]},
    {"levels": ["a"], "domains": [{"values": ["x", "y"], "count": 1}]},
    {"levels": ["a"], "domains": [{"values": ["x"], "count": "1"}]},
    {"levels": [], "domains": []},
    {"levels": "a", "domains": []},
    {"levels": [7], "domains": [{"values": ["x"], "count": 1}]},
    {"levels": ["a"]},
    "not an object",
])
def test_malformed_assignments_raise_assignment_error(bad: object) -> None:
    with pytest.raises(AssignmentError):
        list(iter_domains(bad))  # type: ignore[arg-type]


def test_domain_paths_fill_upper_levels_from_nodes() -> None:
    levels = TopologyLevels.build([BLOCK, RACK, HOSTNAME_LABEL])
    nodes = {"h1": {BLOCK: "b1", RACK: "r1", HOSTNAME_LABEL: "h1"}}
    paths = DomainPaths(levels, nodes)
    assert paths.path([HOSTNAME_LABEL], ["h1"]) == (("block", "b1"), ("rack", "r1"), ("host", "h1"))
    assert paths.path([HOSTNAME_LABEL], ["unknown"]) == (("block", ""), ("rack", ""), ("host", "unknown"))
    # a multi-level assignment keeps its own values, even where a node says otherwise
    assert paths.path([BLOCK, RACK], ["b9", "r9"]) == (("block", "b9"), ("rack", "r9"), ("host", ""))
    assert paths.path([BLOCK, RACK, HOSTNAME_LABEL], ["b2", "r2", "h1"]) == (("block", "b2"), ("rack", "r2"), ("host", "h1"))
