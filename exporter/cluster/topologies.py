"""Kueue Topologies and ResourceFlavors: where the topology levels (block, rack, host) come from.

A ``Topology`` lists node label keys from the top level down (``spec.levels[].nodeLabel``); a
``ResourceFlavor`` points at one through ``spec.topologyName``. gangscope exports one set of
topology labels for every series, so several Topologies are merged into one ordered list by
:func:`merge_levels`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .fields import ParseError, Problems, as_dict, as_list, as_str, str_map


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
