"""The README is for users: what the program does and prints, not how its development went.

Checked here: no sentence of the development log (the project's machines, other people's
builds, what could not be measured where), the layers explain prints as the README names and
shows them, and the size of the full state set the series budget declines, from the code's lists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.cluster.gang_state import GANG_STAGES
from exporter.cluster.podgroups import PHASES
from exporter.cluster.workloads import CHECK_STATES, STAGES
from exporter.explain import LAYERS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()

DEVELOPMENT_LOG = ["other engineers", "ran meanwhile", "second host", "first host", "by host",
                   "build machine", "development machine", "container engine", "CI machine", "not obtainable",
                   "no route to"]


@pytest.mark.parametrize("words", DEVELOPMENT_LOG)
def test_no_development_log(words: str) -> None:
    found = [n for n, line in enumerate(README.splitlines(), 1) if words.lower() in line.lower()]
    assert found == [], f"README lines {found} say {words!r}: the README is for users"


def test_explain_is_described_and_shown_with_every_layer() -> None:
    assert len(LAYERS) == 6 and "walks the six layers" in README and "four layers" not in README
    sample = README[README.index("$ gangscope explain ml-team/llama-train"):]
    sample = sample[:sample.index("```")]
    rows = [m.group(1) for m in re.finditer(r"^  (\w+) {2,}(?:ok|BLOCKING|not reached|unknown|SLOW)\b", sample, re.M)]
    assert rows == list(LAYERS)


def test_the_full_state_set_sizes_are_the_codes() -> None:
    phases = sorted(len(p) for p in PHASES.values())
    sentence = (f"at {len(STAGES)} series per Workload (its stages), {len(GANG_STAGES)} per\n  gang, {phases[0]} to "
                f"{phases[-1]} per PodGroup (its API's phases) and {len(CHECK_STATES)} per admission check instead of one")
    assert sentence in README
