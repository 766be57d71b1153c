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

from .fields import shared

HOSTNAME_LABEL = "kubernetes.io/hostname"
_INVALID = re.compile(r"[^a-z0-9_]")


class TopologyError(ValueError):
    """A topology setting that cannot work (two label keys with one alias, a bad alias)."""


class AssignmentError(ValueError):
    """A topologyAssignment that does not follow the API's shape (counted as a parse error)."""


def _label_name(text: str) -> str:
    """``text`` lower-cased as a Prometheus label name: characters outside ``[a-z0-9_]`` become
    ``_``; a leading digit gets a ``_`` before it; never the reserved ``__`` prefix."""
    name = _INVALID.sub("_", text.lower())
    if not name or name[0].isdigit():
        name = "_" + name
    if name.startswith("__"):
        name = "_" + name.lstrip("_")
    return name


def alias_candidates(label_key: str) -> tuple[str, ...]:
    """The label names a node label key may get, preferred first (see :func:`assign_aliases`).

    1. short: the last path segment after ``/``, with anything up to and including the last
       ``topology-`` removed (``cloud.google.com/gce-topology-block`` -> ``block``);
    2. segment: the whole last path segment (``gce_topology_host``);
    3. full: the whole key (``cloud_google_com_gce_topology_host``).

    ``kubernetes.io/hostname`` prefers ``host``. Every candidate is made a valid label name by
    :func:`_label_name`; duplicates are dropped.
    """
    segment = label_key.rsplit("/", 1)[-1]
    idx = segment.rfind("topology-")
    short = segment[idx + len("topology-"):] if idx >= 0 else segment
    first = ("host",) if label_key == HOSTNAME_LABEL else ()
    return tuple(dict.fromkeys((*first, _label_name(short), _label_name(segment), _label_name(label_key))))


def alias_for(label_key: str) -> str:
    """The preferred label name of a node label key alone (its first candidate)."""
    return alias_candidates(label_key)[0]


def assign_aliases(keys: Sequence[str], overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """One distinct label name per node label key, the same for the same set of keys whatever
    their order (ARCHITECTURE.md, "The topology tag"; README "Topology labels").

    ``--topology-alias`` overrides are taken first (and rejected, naming both keys, when two
    claim one name). Each other key then takes its first :func:`alias_candidates` name that is
    neither reserved nor taken, with one tie-break: a name that several keys want in the same
    round goes to the hostname level if it is one of them (``host``), else to the key first in
    sort order; the others move to their next candidate. So GKE's standard levels
    (``cloud.google.com/gce-topology-block``, ``-subblock``, ``-host``, ``kubernetes.io/hostname``)
    get ``block``, ``subblock``, ``gce_topology_host`` and ``host``, and a second provider's
    ``rack`` key leaves the first one's label alone when its key sorts after it. Keys whose every
    candidate collides (``a.b/c`` and ``a-b/c``) end with the full form numbered in key order
    (``a_b_c``, ``a_b_c_2``).
    """
    overrides = overrides or {}
    out: dict[str, str] = {}
    owner: dict[str, str] = {}
    for key in keys:
        name = overrides.get(key)
        if name is None:
            continue
        check_alias(name, key)
        if name in owner:
            raise TopologyError(f"node label keys {owner[name]!r} and {key!r} both map to the label {name!r}; "
                                f"give one of them another --topology-alias")
        out[key], owner[name] = name, key
    pending = sorted({k for k in keys if k not in out})
    base = {k: alias_candidates(k) for k in pending}
    step = dict.fromkeys(pending, 0)

    def candidate(key: str) -> str:
        names, n = base[key], step[key]
        return names[n] if n < len(names) else f"{names[-1]}_{n - len(names) + 2}"

    while pending:
        wants: dict[str, list[str]] = {}
        for key in pending:
            wants.setdefault(candidate(key), []).append(key)
        for name, wanting in wants.items():
            if name in owner or name in RESERVED_LABELS:
                winner = None
            elif len(wanting) == 1:
                winner = wanting[0]
            elif HOSTNAME_LABEL in wanting:
                winner = HOSTNAME_LABEL
            else:
                winner = wanting[0]  # ``pending`` is sorted: the first key in sort order
            for key in wanting:
                if key == winner:
                    out[key], owner[name] = name, key
                else:
                    step[key] += 1
        pending = [k for k in pending if k not in out]
    return out


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def check_alias(name: str, key: str) -> None:
    """Raise :class:`TopologyError` saying which names are allowed when ``name`` cannot label ``key``."""
    if not _LABEL_NAME.fullmatch(name) or name.startswith("__") or name in RESERVED_LABELS:
        why = "is a label gangscope already puts on its series" if name in RESERVED_LABELS else "is not a valid label name"
        raise TopologyError(
            f"--topology-alias {key}={name}: {name!r} {why}; allowed: a name matching [a-zA-Z_][a-zA-Z0-9_]* "
            f"that does not start with __ and is none of: {', '.join(sorted(RESERVED_LABELS))}")


def parse_alias_overrides(pairs: Sequence[str]) -> dict[str, str]:
    """``--topology-alias KEY=NAME`` values into a mapping; NAME must be an allowed label name."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, name = pair.partition("=")
        if not sep or not key:
            raise TopologyError(f"--topology-alias wants KEY=NAME, got {pair!r}")
        check_alias(name, key)
        if key in out:
            raise TopologyError(f"--topology-alias {key} given twice ({key}={out[key]} and {pair}): give each key once")
        out[key] = name
    return out


@dataclass(frozen=True)
class TopologyLevels:
    """Ordered node label keys (top level first) and their label aliases.

    Levels come from Kueue ``Topology`` objects or ``--topology-levels``; the hostname level is
    always present (added last when missing) so every domain path ends with ``host``. Aliases
    come from :func:`assign_aliases`, so the collector and the agent, given the same keys, use
    the same labels.
    """

    keys: tuple[str, ...]
    aliases: tuple[str, ...]

    @classmethod
    def build(cls, keys: Sequence[str], overrides: Mapping[str, str] | None = None) -> TopologyLevels:
        ordered = [k for k in dict.fromkeys(keys) if k != HOSTNAME_LABEL]
        ordered.append(HOSTNAME_LABEL)
        names = assign_aliases(ordered, overrides)
        return cls(tuple(ordered), tuple(names[k] for k in ordered))

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
            if key == HOSTNAME_LABEL:
                out.append((alias, value or node_name))
            else:
                pair = (alias, value)
                out.append(shared(_PAIRS, pair, pair))
        return out


# The pairs of the levels above the host, one object per (alias, value) (fields.shared): every
# node of a block or rack repeats them, and the collector keeps a path per node in the store and
# in the capacity (16,384 nodes: 65,000 pairs otherwise). Hostnames come and go with the nodes and
# are not kept here; the rest is bounded by the cluster's blocks and racks.
_PAIRS: dict[tuple[str, str], tuple[str, str]] = {}


# Labels gangscope itself puts on series; a topology alias must not shadow them.
RESERVED_LABELS = frozenset(
    {
        "namespace", "workload", "podset", "podgroup", "api", "stage", "type", "status", "reason",
        "underlying_cause", "cluster_queue", "local_queue", "priority_class", "owner_kind", "owner_name",
        "source", "phase", "state", "gpu", "uuid", "pod", "container", "link", "node", "family",
        "job", "instance", "le", "quantile", "device", "port", "interface", "direction", "kind", "name",
        "pci_bus_id", "driver_version", "mig_uuid", "gpu_instance", "join_key", "result",
        "check", "category", "flavor", "topology", "problem", "level", "gpus_per_pod", "scope", "mode",
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
    ``fill`` names the levels that may be filled that way: those of the assignment's own
    flavor's Topology (None: every level); a level outside it stays ``""``.
    """

    levels: TopologyLevels
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def path(self, assignment_levels: Sequence[str], values: Sequence[str],
             fill: frozenset[str] | None = None) -> tuple[tuple[str, str], ...]:
        known = dict(zip(assignment_levels, values))
        host = known.get(HOSTNAME_LABEL)
        node = self.node_labels.get(host, {}) if host else {}
        out = []
        for key, alias in zip(self.levels.keys, self.levels.aliases):
            value = known.get(key)
            if value is None:
                value = node.get(key, "") if fill is None or key in fill else ""
            out.append((alias, value))
        return tuple(out)
