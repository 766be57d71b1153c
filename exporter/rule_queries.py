"""The recording rules as queries of their own: one definition for the rules and for explain.

explain's training layer asks what the ``gangscope-training.rules`` decide (a Workload's
scheduling events, hardware signals and interconnect ratio) on any Prometheus, with or without
those rules loaded and over history recorded before they were. It does not write its own PromQL
for them: it takes the rule's expression from the generated rules file shipped in this package
(``exporter/rules/gangscope-rules.yaml``, written by alerts/generate.py from alerts/config.yaml,
the same bytes as alerts/gangscope-rules.yaml) and replaces each recorded series it reads by the
expression that records it, until only scraped series are left. So an event or a signal added to
the rules is explain's at once, and a query the rules get right explain cannot get wrong.

How a reference to a recorded series becomes its expression (what Prometheus's rule manager does
over time, done in one query):

* ``record`` -> ``(expr)``; a name recorded by several rules, each with its static ``labels``
  (``event="restarted"``, ``direction="receive"``), -> the union of each expression with its
  labels set (``label_replace(expr, "event", "restarted", "", "")``, joined by ``or``);
* ``record{label="value"}`` -> the rules whose static labels match;
* ``record[range]`` (inside ``rate``, ``avg_over_time``, ``changes``) -> the subquery
  ``(expr)[range:step]``, ``step`` the rule group's ``interval`` (else Prometheus's default
  evaluation interval, 1m): the points the rule would have recorded;
* ``record{workload!=""}`` (or ``namespace!=""``) -> ``record``: explain's queries keep one
  Workload's series (:func:`for_workload`), which carry both labels, so the matcher keeps nothing
  more there;
* what the inlining cannot express (another matcher on a label the rules do not set, an ``offset``
  without a range on a recorded series) raises :class:`ValueError`: a test generates every query
  explain builds, so such a rule cannot ship unnoticed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

RULES_FILE = "rules/gangscope-rules.yaml"
ALERTS_FILE = "rules/gangscope-alerts.yaml"
DEFAULT_STEP = "1m"  # Prometheus's default evaluation_interval; the rule groups set none
_NAME = re.compile(r"(?<![\w:])([a-zA-Z_][a-zA-Z0-9_]*(?::[a-zA-Z0-9_]+)+)(?![\w:(])")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True, slots=True)
class Rule:
    expr: str
    labels: tuple[tuple[str, str], ...]
    step: str  # its group's evaluation interval: the spacing of the points it records


class Rules:
    """The recording rules by record name, and their expressions with every record inlined."""

    def __init__(self, groups: list[dict[str, Any]], step: str = DEFAULT_STEP) -> None:
        self.records: dict[str, list[Rule]] = {}
        self.alerts: dict[str, str] = {}  # alert name -> its expression (the condition, before its ``for``)
        for group in groups:
            for rule in group.get("rules", []):
                if "alert" in rule:
                    self.alerts[rule["alert"]] = rule["expr"]
                elif "record" in rule:
                    labels = tuple(sorted((rule.get("labels") or {}).items()))
                    self.records.setdefault(rule["record"], []).append(Rule(rule["expr"], labels, group.get("interval") or step))

    @classmethod
    def load(cls, paths: Sequence[Path] = (), step: str = DEFAULT_STEP) -> Rules:
        """The rules of ``paths`` (recording rules and alerts, any number of files), else the two
        files shipped in the package."""
        package = resources.files("exporter")
        texts = [p.read_text() for p in paths] or [package.joinpath(f).read_text() for f in (RULES_FILE, ALERTS_FILE)]
        return cls([g for text in texts for g in (yaml.safe_load(text) or {}).get("groups") or []], step)

    def alert(self, name: str) -> str:
        """The condition of alert ``name`` (what its ``for`` waits on), recorded series inlined."""
        if name not in self.alerts:
            raise ValueError(f"no alert {name} in the rules")
        return self.inline(self.alerts[name])

    def named(self, prefix: str) -> str:
        """The one record whose name starts with ``prefix`` (names carry the configured rate window)."""
        found = sorted(n for n in self.records if n.startswith(prefix))
        if len(found) != 1:
            raise ValueError(f"the rules record {len(found)} series named {prefix}*: {found}")
        return found[0]

    def record(self, name: str, match: Mapping[str, str] | None = None, _stack: tuple[str, ...] = ()) -> str:
        """The expression of ``name`` (the rules with these static labels), recorded series inlined."""
        if name in _stack:
            raise ValueError(f"{name} is recorded from itself (a rule that keeps state): it has no expression of scraped series")
        rules = self.records.get(name)
        if not rules:
            raise ValueError(f"no recording rule records {name}")
        static = {k for r in rules for k, _ in r.labels}
        if set(match or {}) - static:
            raise ValueError(f"{name}{{{', '.join(sorted(set(match or {}) - static))}=...}}: a matcher on a label of the "
                             "recorded series, not one the rules set, cannot be inlined")
        chosen = [r for r in rules if all(dict(r.labels).get(k) == v for k, v in (match or {}).items())]
        if not chosen:
            raise ValueError(f"no rule records {name} with labels {dict(match or {})}")
        parts = []
        for r in chosen:
            body = self.inline(r.expr, (*_stack, name))
            for k, v in r.labels:
                body = f'label_replace({body}, "{k}", "{v}", "", "")'
            parts.append(body if r.labels else f"({body})")
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"

    def inline(self, expr: str, _stack: tuple[str, ...] = ()) -> str:
        """``expr`` with each recorded series replaced by its expression (see module doc)."""
        out, pos = [], 0
        for m in _NAME.finditer(expr):
            name = m.group(1)
            if name not in self.records or _in_string(expr, m.start()):
                continue
            end = m.end()
            match: dict[str, str] = {}
            rest = expr[end:]
            sel = re.match(r"\s*\{([^}]*)\}", rest)
            if sel:
                match = _matchers(sel.group(1), name)
                end += sel.end()
            rng = re.match(r"\s*\[([^\]:]+)\]", expr[end:])
            body = self.record(name, match, _stack)
            if rng:
                body = f"({body})[{rng.group(1).strip()}:{self.records[name][0].step}]"
                end += rng.end()
            elif re.match(r"\s+offset\b", expr[end:]):
                raise ValueError(f"{name} offset without a range cannot be inlined")
            out += [expr[pos:m.start()], body]
            pos = end
        return "".join(out) + expr[pos:]


def for_workload(expr: str, namespace: str, workload: str) -> str:
    """``expr`` (series labelled ``namespace`` and ``workload``) for one Workload."""
    key = f'label_replace(label_replace(vector(1), "namespace", "{_q(namespace)}", "", ""), "workload", "{_q(workload)}", "", "")'
    return f"({expr})\nand on (namespace, workload)\n{key}"


def _q(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _matchers(text: str, name: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    while pos < len(text.strip()):
        m = _MATCHER.match(text, pos)
        if m is not None and (m.group(1), m.group(2), m.group(3)) in (("workload", "!=", ""), ("namespace", "!=", "")):
            pos = m.end()
            continue  # see the module doc: for_workload keeps only series with both
        if m is None or m.group(2) != "=":
            raise ValueError(f"{name}{{{text}}}: only label=\"value\" matchers on a recorded series can be inlined")
        out[m.group(1)] = m.group(3)
        pos = m.end()
    return out


def _in_string(expr: str, at: int) -> bool:
    """Whether ``at`` is inside a double-quoted string (a label value such as "(.+)")."""
    quotes = 0
    i = 0
    while i < at:
        if expr[i] == "\\":
            i += 2
            continue
        if expr[i] == '"':
            quotes += 1
        i += 1
    return quotes % 2 == 1
