"""Topology levels, their Prometheus label aliases, and expansion of Kueue topology assignments.

Every series gangscope exports carries the same topology labels (``block``, ``rack``, ``host``
in a typical cluster), so one rack's NodeFailures eviction, stuck gang and NVLink drop line up
in one query. This module is the single place that decides those label names and that turns a
Workload's ``topologyAssignment`` (v1beta1 ``domains`` or v1beta2 compressed ``slices``) into
domains with pod counts, in Kueue's own order.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

HOSTNAME_LABEL = "kubernetes.io/hostname"
_INVALID = re.compile(r"[^a-z0-9_]")


class TopologyError(ValueError):
    """A topology setting that cannot work (two label keys with one alias, a bad alias)."""


class AssignmentError(ValueError):
    """A topologyAssignment that does not follow the API's shape (counted as a parse error)."""


def alias_for(label_key: str) -> str:
    """The Prometheus label name for a node label key (ARCHITECTURE.md, "The topology tag").

    The last path segment after ``/``, with anything up to and including the last ``topology-``
    removed, lower-cased, characters outside ``[a-z0-9_]`` replaced by ``_``;
    ``kubernetes.io/hostname`` becomes ``host``.
    """
    if label_key == HOSTNAME_LABEL:
        return "host"
    segment = label_key.rsplit("/", 1)[-1]
    idx = segment.rfind("topology-")
    if idx >= 0:
        segment = segment[idx + len("topology-") :]
    alias = _INVALID.sub("_", segment.lower())
    if not alias or alias[0].isdigit():
        alias = "_" + alias
    return alias


def parse_alias_overrides(pairs: Sequence[str]) -> dict[str, str]:
    """``--topology-alias KEY=NAME`` values into a mapping; NAME must be a valid label name."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, name = pair.partition("=")
        if not sep or not key or not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name):
            raise TopologyError(f"--topology-alias wants KEY=NAME with NAME a label name, got {pair!r}")
        out[key] = name
    return out


@dataclass(frozen=True)
class TopologyLevels:
    """Ordered node label keys (top level first) and their label aliases.

    Levels come from Kueue ``Topology`` objects or ``--topology-levels``; the hostname level is
    always present (added last when missing) so every domain path ends with ``host``.
    """

    keys: tuple[str, ...]
    aliases: tuple[str, ...]

    @classmethod
    def build(cls, keys: Sequence[str], overrides: Mapping[str, str] | None = None) -> TopologyLevels:
        overrides = overrides or {}
        ordered: list[str] = []
        for key in keys:
            if key not in ordered:
                ordered.append(key)
        if HOSTNAME_LABEL in ordered:
            ordered.remove(HOSTNAME_LABEL)
        ordered.append(HOSTNAME_LABEL)
        aliases: list[str] = []
        seen: dict[str, str] = {}
        for key in ordered:
            alias = overrides.get(key) or alias_for(key)
            if alias in seen:
                raise TopologyError(
                    f"node label keys {seen[alias]!r} and {key!r} both map to the label {alias!r}; "
                    f"set --topology-alias {key}=NAME"
                )
            if alias in RESERVED_LABELS:
                raise TopologyError(f"node label key {key!r} maps to the reserved label {alias!r}; set --topology-alias")
            seen[alias] = key
            aliases.append(alias)
        return cls(tuple(ordered), tuple(aliases))

    def alias(self, key: str) -> str | None:
        try:
            return self.aliases[self.keys.index(key)]
        except ValueError:
            return None

    def labels_from_node(self, node_labels: Mapping[str, str], node_name: str = "") -> list[tuple[str, str]]:
        """Topology label pairs for a node: every level, ``""`` where the node lacks the label."""
        out = []
        for key, alias in zip(self.keys, self.aliases):
            value = node_labels.get(key, "")
            if key == HOSTNAME_LABEL and not value:
                value = node_name
            out.append((alias, value))
        return out


# Labels gangscope itself puts on series; a topology alias must not shadow them.
RESERVED_LABELS = frozenset(
    {
        "namespace", "workload", "podset", "podgroup", "api", "stage", "type", "status", "reason",
        "underlying_cause", "cluster_queue", "local_queue", "priority_class", "owner_kind", "owner_name",
        "source", "phase", "state", "gpu", "uuid", "pod", "container", "link", "node", "family",
        "job", "instance", "le", "quantile", "device", "port", "interface", "direction", "kind", "name",
        "pci_bus_id", "driver_version", "mig_uuid", "gpu_instance", "join_key", "result",
    }
)


@dataclass(slots=True)
class Domain:
    """One assigned domain: a value per assignment level and its pod count.

    Not frozen: a frozen dataclass costs 2.5x more to create, and a 20,000-Workload sync
    creates hundreds of thousands of these.
    """

    values: tuple[str, ...]
    count: int


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AssignmentError(f"{what} must be an integer, got {type(value).__name__}")
    return value


def _str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise AssignmentError(f"{what} must be a string, got {type(value).__name__}")
    return value


def _list(value: object, what: str) -> list:
    if not isinstance(value, list):
        raise AssignmentError(f"{what} must be a list, got {type(value).__name__}")
    return value


def iter_domains(assignment: Mapping) -> Iterator[Domain]:
    """Expand a topologyAssignment of either API version, in Kueue's order.

    v1beta1 ``{levels, domains[{values, count}]}``; v1beta2 ``{levels, slices[{domainCount,
    valuesPerLevel[{universal | individual{prefix, roots, suffix}}], podCounts{universal |
    individual}}]}`` expanded like ``pkg/util/tas.InternalSeqFrom``: for each slice, for each i,
    value = universal or prefix + roots[i] + suffix. Raises :class:`AssignmentError` on a shape
    the API forbids (mismatched lengths, both or neither of universal/individual).
    """
    if not isinstance(assignment, Mapping):
        raise AssignmentError("topologyAssignment must be an object")
    levels = [_str(level, "levels[]") for level in _list(assignment.get("levels"), "levels")]
    nlevels = len(levels)
    if nlevels == 0:
        raise AssignmentError("levels must not be empty")
    if "domains" in assignment:
        for i, dom in enumerate(_list(assignment["domains"], "domains")):
            if not isinstance(dom, Mapping):
                raise AssignmentError(f"domains[{i}] must be an object")
            values = tuple(_str(v, f"domains[{i}].values[]") for v in _list(dom.get("values"), f"domains[{i}].values"))
            if len(values) != nlevels:
                raise AssignmentError(f"domains[{i}] has {len(values)} values for {nlevels} levels")
            yield Domain(values, _int(dom.get("count"), f"domains[{i}].count"))
        return
    for s, sl in enumerate(_list(assignment.get("slices"), "slices")):
        if not isinstance(sl, Mapping):
            raise AssignmentError(f"slices[{s}] must be an object")
        n = _int(sl.get("domainCount"), f"slices[{s}].domainCount")
        if n < 0:
            raise AssignmentError(f"slices[{s}].domainCount must not be negative")
        per_level = _list(sl.get("valuesPerLevel"), f"slices[{s}].valuesPerLevel")
        if len(per_level) != nlevels:
            raise AssignmentError(f"slices[{s}] has {len(per_level)} valuesPerLevel for {nlevels} levels")
        columns = [_level_values(v, n, f"slices[{s}].valuesPerLevel[{l}]") for l, v in enumerate(per_level)]
        counts = _pod_counts(sl.get("podCounts"), n, f"slices[{s}].podCounts")
        if isinstance(counts, int):
            counts = [counts] * n
        if nlevels == 1:  # the common hostname-only assignment
            col = columns[0]
            for value, count in zip([col] * n if isinstance(col, str) else col, counts):
                yield Domain((value,), count)
        else:
            for values, count in zip(zip(*[[c] * n if isinstance(c, str) else c for c in columns]), counts):
                yield Domain(values, count)


def _level_values(v: object, n: int, what: str) -> str | list[str]:
    if not isinstance(v, Mapping):
        raise AssignmentError(f"{what} must be an object")
    has_u, has_i = v.get("universal") is not None, v.get("individual") is not None
    if has_u == has_i:
        raise AssignmentError(f"{what} must set exactly one of universal and individual")
    if has_u:
        return _str(v["universal"], f"{what}.universal")
    ind = v["individual"]
    if not isinstance(ind, Mapping):
        raise AssignmentError(f"{what}.individual must be an object")
    prefix = _str(ind.get("prefix") or "", f"{what}.individual.prefix")
    suffix = _str(ind.get("suffix") or "", f"{what}.individual.suffix")
    roots = _list(ind.get("roots"), f"{what}.individual.roots")
    if len(roots) != n:
        raise AssignmentError(f"{what}.individual.roots has {len(roots)} items for domainCount {n}")
    if not all(isinstance(r, str) for r in roots):
        raise AssignmentError(f"{what}.individual.roots[] must be strings")
    return [prefix + r + suffix for r in roots]


def _pod_counts(pc: object, n: int, what: str) -> int | list[int]:
    if not isinstance(pc, Mapping):
        raise AssignmentError(f"{what} must be an object")
    has_u, has_i = pc.get("universal") is not None, pc.get("individual") is not None
    if has_u == has_i:
        raise AssignmentError(f"{what} must set exactly one of universal and individual")
    if has_u:
        return _int(pc["universal"], f"{what}.universal")
    counts = _list(pc["individual"], f"{what}.individual")
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        raise AssignmentError(f"{what}.individual[] must be integers")
    if len(counts) != n:
        raise AssignmentError(f"{what}.individual has {len(counts)} items for domainCount {n}")
    return counts


@dataclass
class DomainPaths:
    """Full topology paths (one value per configured level) for assignment domains.

    An assignment stores only the levels Kueue kept (only ``kubernetes.io/hostname`` when that is
    the lowest level); the upper levels are filled from the Nodes' labels so each series carries
    the whole path. ``node_labels`` is the live map of node name -> labels kept by the collector.
    """

    levels: TopologyLevels
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def path(self, assignment_levels: Sequence[str], values: Sequence[str]) -> tuple[tuple[str, str], ...]:
        known = dict(zip(assignment_levels, values))
        host = known.get(HOSTNAME_LABEL)
        node = self.node_labels.get(host, {}) if host else {}
        out = []
        for key, alias in zip(self.levels.keys, self.levels.aliases):
            value = known.get(key)
            if value is None:
                value = node.get(key, "")
            out.append((alias, value))
        return tuple(out)
