"""Kueue Topologies and ResourceFlavors: where the topology levels (block, rack, host) come from.

A ``Topology`` lists node label keys from the top level down (``spec.levels[].nodeLabel``); a
``ResourceFlavor`` points at one through ``spec.topologyName``. gangscope exports one set of
topology labels for every series, so several Topologies are merged into one ordered list by
:func:`merge_levels`, and each assignment is expanded with the levels of its own flavor's
Topology (:func:`resolve_flavor_topology`). Both the collector and the agent read Topologies, so
this lives beside :mod:`exporter.topology`, outside ``exporter.cluster`` (which the agent must
not import).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .fields import ParseError, Problems, as_dict, as_list, as_str, str_map
from .taints import Toleration, parse_tolerations


@dataclass(slots=True)
class Topology:
    name: str
    levels: tuple[str, ...]
    problems: list[str]


@dataclass(slots=True)
class ResourceFlavor:
    name: str
    topology_name: str
    node_labels: dict[str, str]
    problems: list[str]
    # spec.tolerations: added to the pods admitted in this flavor, and so to the tolerations
    # topology-aware scheduling checks nodes with (kueue tas_flavor_snapshot.go:961)
    tolerations: tuple[Toleration, ...] = ()


def _name(obj: Any, kind: str, p: Problems) -> tuple[str, dict]:
    if not isinstance(obj, dict):
        raise ParseError(f"expected an object, got {type(obj).__name__}")
    name = as_dict(obj.get("metadata"), "metadata", p).get("name")
    if not isinstance(name, str) or not name:
        raise ParseError(f"{kind} without metadata.name")
    return name, as_dict(obj.get("spec"), "spec", p)


def parse_topology(obj: Any) -> Topology:
    p: Problems = []
    name, spec = _name(obj, "Topology", p)
    levels = []
    for i, level in enumerate(as_list(spec.get("levels"), "spec.levels", p)):
        key = as_str(as_dict(level, f"spec.levels[{i}]", p).get("nodeLabel"), f"spec.levels[{i}].nodeLabel", p)
        if key:
            levels.append(key)
        else:
            p.append(f"spec.levels[{i}].nodeLabel missing")
    return Topology(name, tuple(levels), p)


def parse_resource_flavor(obj: Any) -> ResourceFlavor:
    p: Problems = []
    name, spec = _name(obj, "ResourceFlavor", p)
    return ResourceFlavor(
        name, as_str(spec.get("topologyName"), "spec.topologyName", p),
        str_map(spec.get("nodeLabels"), "spec.nodeLabels", p), p,
        parse_tolerations(spec.get("tolerations"), "spec.tolerations", p),
    )


def merge_levels(topologies: Iterable[Topology]) -> list[str]:
    """One ordered level list from several Topologies, stable whatever the event order.

    Topologies are taken by name; each key not yet known is inserted just above the first of its
    own lower levels already in the list (else at the bottom). So ``[rack, host]`` and
    ``[block, rack, host]`` merge into ``[block, rack, host]`` whichever name sorts first, and
    unrelated hierarchies keep the order of the Topology that sorts first.
    """
    merged: list[str] = []
    for topo in sorted(topologies, key=lambda t: t.name):
        for idx, key in enumerate(topo.levels):
            if key in merged:
                continue
            pos = len(merged)
            for lower in topo.levels[idx + 1:]:
                if lower in merged:
                    pos = merged.index(lower)
                    break
            merged.insert(pos, key)
    return merged


# Why an assignment's upper levels could not be taken from its own flavor's Topology.
FLAVOR_MISSING = "flavor_missing"  # no ResourceFlavor of that name is known
NO_TOPOLOGY_NAME = "no_topology_name"  # the ResourceFlavor sets no spec.topologyName
TOPOLOGY_MISSING = "topology_missing"  # spec.topologyName names a Topology that is not known


@dataclass(frozen=True, slots=True)
class FlavorTopology:
    """The Topology whose levels expand an assignment of ``flavor`` (``levels`` None when it
    could not be resolved; ``problem`` then says why)."""

    flavor: str
    topology: str
    levels: frozenset[str] | None
    problem: str = ""


def resolve_flavor_topology(flavor_names: Iterable[str], flavors: Mapping[str, ResourceFlavor],
                            topologies: Mapping[str, Topology]) -> FlavorTopology:
    """The Topology of an assignment's flavors (``podSetAssignments[].flavors`` values).

    Kueue places a pod set by topology only in a TAS flavor, one whose ResourceFlavor sets
    ``spec.topologyName`` (kueue apis/kueue/v1beta2/resourceflavor_types.go:104-109;
    pkg/cache/scheduler/cache.go:1062), so the first such flavor (by name) is the assignment's.
    When the known flavors name none, an unknown one (or, in a dump that left ``flavors`` out,
    the unrecorded one) must be the TAS flavor: with a single known Topology that is the only one
    it can name. Otherwise the result names the flavors in
    question (comma-separated: the unknown ones, else all) and the problem, and the caller fills
    nothing it cannot read from the assignment itself.
    """
    names = sorted(set(flavor_names))
    for rf in (flavors[n] for n in names if n in flavors):
        if rf.topology_name:
            topo = topologies.get(rf.topology_name)
            if topo is None:
                return FlavorTopology(rf.name, rf.topology_name, None, TOPOLOGY_MISSING)
            return FlavorTopology(rf.name, topo.name, frozenset(topo.levels))
    unknown = [n for n in names if n not in flavors]
    if (unknown or not names) and len(topologies) == 1:
        (topo,) = topologies.values()
        return FlavorTopology(",".join(unknown), topo.name, frozenset(topo.levels))
    if unknown or not names:
        return FlavorTopology(",".join(unknown), "", None, FLAVOR_MISSING)
    return FlavorTopology(",".join(names), "", None, NO_TOPOLOGY_NAME)
