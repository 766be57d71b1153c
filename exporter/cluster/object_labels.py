"""--metric-labels-allowlist: Workload and PodGroup metadata labels as series, as kube-state-metrics does.

kube-state-metrics exports an object's Kubernetes labels on ``kube_<kind>_labels`` only where
``--metric-labels-allowlist`` names them, since labels are unbounded and most are noise; gangscope
does the same for the two objects users select jobs by: ``gangscope_workload_labels`` and
``gangscope_podgroup_labels`` (value 1), joined to the other series on their identifying labels.
Everything follows kube-state-metrics (repository kubernetes/kube-state-metrics, commit c92fe0c5):

* the flag's syntax ``resource=[key,key],resource=[*]`` and its errors: ``LabelsAllowList.Set``,
  pkg/options/types.go:247-315; ``*`` as the resource means every resource
  (internal/store/builder.go:256);
* which keys are kept: ``createPrometheusLabelKeysValues``, internal/store/utils.go:193-229: ``*``
  as the first entry keeps every label, a later one is ignored; an entry with one ``*`` is a
  pattern over keys (``app.kubernetes.io/*``), with more it is ignored (utils.go:234-262,
  ``MaxPartialWildcardsPerLabel`` = 1 at pkg/options/types.go:35);
* the label names: ``mapToPrometheusLabels``, utils.go:85-129: keys in sorted order, ``label_``
  then the key with every character outside ``[a-zA-Z0-9_]`` replaced by ``_`` and camelCase
  turned into snake_case (utils.go:146-158); keys that end up with one name are all renamed
  ``<name>_conflict1``, ``_conflict2``... in key order, skipping names already taken.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Iterable, Mapping, Sequence

import structlog

from ..exposition import Family

log = structlog.get_logger(__name__)

RESOURCES = ("workloads", "podgroups")
WILDCARD = "*"
PREFIX = "label_"

WORKLOAD_LABELS = Family(
    "gangscope_workload_labels", "gauge",
    "Kubernetes labels of the Workload that --metric-labels-allowlist names, as label_<key> (value 1).",
    ("namespace", "workload"), label_prefix=PREFIX,
)
PODGROUP_LABELS = Family(
    "gangscope_podgroup_labels", "gauge",
    "Kubernetes labels of the PodGroup that --metric-labels-allowlist names, as label_<key> (value 1).",
    ("namespace", "podgroup", "api"), label_prefix=PREFIX,
)

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_CAPS = re.compile(r"([a-z0-9])([A-Z])")


def parse_allowlist(value: str) -> dict[str, list[str]]:
    """``workloads=[team,app.kubernetes.io/name],podgroups=[*]`` as ``{resource: [keys]}``, with
    the checks of kube-state-metrics' parser (LabelsAllowList.Set); raises ValueError."""
    bad = ValueError(f"--metric-labels-allowlist: {value!r} is not resource=[key,...],resource=[...]")
    out: dict[str, list[str]] = {}
    name, start = "", 0
    n = len(value)
    for i, ch in enumerate(value):
        nxt = value[i + 1] if i + 1 < n else None
        prev = value[i - 1] if i else ch
        if ch == "=":
            if prev == "," or nxt != "[":
                raise bad
            name = value[start:i].strip()
            out[name] = []
            start = i + 1
        elif ch == "[":
            if prev != "=":
                raise bad
            start = i + 1
        elif ch == "]":
            if nxt is not None and nxt != ",":
                raise bad
            if prev != "[":
                out.setdefault(name, []).append(value[start:i].strip())
            start = i + 1
        elif ch == ",":
            if prev == ch or nxt is None or nxt == "]":
                raise bad
            if prev != "]":
                out.setdefault(name, []).append(value[start:i].strip())
            start = i + 1
    if value.strip() and not out:
        raise bad
    for resource, keys in out.items():
        if resource != WILDCARD and resource not in RESOURCES:
            raise ValueError(f"--metric-labels-allowlist: unknown resource {resource!r} (known: {', '.join(RESOURCES)}, *)")
        if any(k.count(WILDCARD) > 1 for k in keys):
            raise ValueError(f"--metric-labels-allowlist: {resource}: at most one * per label key")
    return out


def label_name(key: str) -> str:
    """``label_`` and the sanitized, snake_cased key (kube-state-metrics' labelName)."""
    return PREFIX + _CAPS.sub(r"\1_\2", _INVALID.sub("_", key)).lower()


def prometheus_labels(labels: Mapping[str, str]) -> list[tuple[str, str]]:
    """The label pairs of ``labels`` in key order, colliding names made unique the way
    kube-state-metrics does (see the module docstring)."""
    names: list[str] = []
    values: list[str] = []
    used: dict[str, int] = {}
    conflicts: dict[str, int] = {}

    def next_free(base: str, count: int) -> tuple[str, int]:
        while True:
            count += 1
            candidate = f"{base}_conflict{count}"
            if candidate not in used:
                return candidate, count

    for key in sorted(labels):
        base = name = label_name(key)
        if base in conflicts:
            name, conflicts[base] = next_free(base, conflicts[base])
        elif name in used:
            idx = used.pop(name)
            renamed, count = next_free(base, 0)
            names[idx] = renamed
            used[renamed] = idx
            name, conflicts[base] = next_free(base, count)
        used[name] = len(names)
        names.append(name)
        values.append(labels[key])
    return list(zip(names, values))


@functools.lru_cache(maxsize=256)
def _pattern(key: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(part) for part in key.split(WILDCARD)) + "$")


class LabelsAllowlist:
    """Which Kubernetes labels of each resource are exported (parsed from the flag)."""

    def __init__(self, spec: Mapping[str, Sequence[str]]) -> None:
        everything = spec.get(WILDCARD)
        self.keys: dict[str, tuple[str, ...]] = {}
        for resource in RESOURCES:
            keys = spec.get(resource, everything)
            if keys is not None:
                self.keys[resource] = tuple(keys)

    def families(self) -> tuple[Family, ...]:
        return tuple(fam for resource, fam in (("workloads", WORKLOAD_LABELS), ("podgroups", PODGROUP_LABELS))
                     if resource in self.keys)

    def select(self, resource: str, labels: Mapping[str, str]) -> list[tuple[str, str]] | None:
        """The exported label pairs of an object of ``resource``; None when the resource is not allowlisted."""
        allowed = self.keys.get(resource)
        if allowed is None:
            return None
        if allowed[:1] == (WILDCARD,):
            return prometheus_labels(labels)
        kept: dict[str, str] = {}
        for key in allowed:
            if key == WILDCARD:
                continue  # kube-state-metrics honours the full wildcard only as the first entry
            if WILDCARD not in key:
                if key in labels:
                    kept[key] = labels[key]
                continue
            pattern = _pattern(key)
            kept.update((k, v) for k, v in labels.items() if pattern.match(k))
        return prometheus_labels(kept)

    def lines(self, resource: str, family: Family, values: Sequence[str], labels: Mapping[str, str]) -> list[str]:
        """The object's one line in ``family`` (none when the resource is not allowlisted)."""
        pairs = self.select(resource, labels)
        return [] if pairs is None else [family.sample(values, 1, extra=pairs)]


def allowlist_argument(value: str) -> str:
    """argparse ``type`` of the flag: checked when the command line is parsed, kept as given."""
    try:
        parse_allowlist(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def from_flag(values: Iterable[str]) -> LabelsAllowlist | None:
    """The allowlist of the repeated flag (later resources override earlier ones); None when not given."""
    spec: dict[str, list[str]] = {}
    for value in values:
        spec.update(parse_allowlist(value))
    return LabelsAllowlist(spec) if spec else None
