"""The job judgement on records alone (exporter/cluster/job_state.py): when a training process's
report counts as stale, for every shape of trainerStatus Kubeflow Trainer allows
(kubeflow/trainer 8c0f5059 pkg/apis/trainer/v1alpha1/trainjob_types.go:565-592)."""

from __future__ import annotations

import pytest

from exporter.cluster import job_state
from exporter.cluster.jobs import JobRecord
from exporter.cluster.podgroups import Condition

NOW = 1_800_000_000.0
STALE = 1800.0


def rec(**fields: object) -> JobRecord:
    return JobRecord("TrainJob", "ml", "sft", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("fields", "since"), [
    # percentage, estimate and metrics: stale since the last move
    ({"progress": 0.62, "remaining_seconds": 5400, "progress_metrics": (("loss", "1.97"),), "progress_changed": NOW - 2400}, NOW - 2400),
    # metrics only, no percentage
    ({"progress_metrics": (("loss", "1.97"),), "progress_changed": NOW - 2400}, NOW - 2400),
    # an estimate only
    ({"remaining_seconds": 5400, "progress_changed": NOW - 2400}, NOW - 2400),
    # moved 29 minutes ago: not yet
    ({"progress": 0.62, "progress_changed": NOW - 1740}, None),
    # reported 100%: done, its Complete condition follows
    ({"progress": 1.0, "progress_changed": NOW - 7200}, None),
    # nothing reported yet (lastUpdatedTime alone is no report)
    ({"progress_updated": NOW - 7200}, None),
    # suspended, and finished
    ({"progress": 0.3, "progress_changed": NOW - 7200, "conditions": (Condition("Suspended", "True", "Suspended", "", None),)}, None),
    ({"progress": 0.9, "progress_changed": NOW - 7200, "conditions": (Condition("Complete", "True", "JobsCompleted", "", None),)}, None),
])
def test_progress_stale_since(fields: dict[str, object], since: float | None) -> None:
    assert job_state.progress_stale_since(rec(**fields), NOW, STALE) == since


def test_progress_moves_on_any_reported_field() -> None:
    before = rec(progress=0.07, remaining_seconds=965_000, progress_metrics=(("loss", "1.91"),), progress_changed=NOW)
    same = rec(progress=0.07, remaining_seconds=965_000, progress_metrics=(("loss", "1.91"),))
    assert not job_state.progress_moved(before, same)
    for changed in (rec(progress=0.08, remaining_seconds=965_000, progress_metrics=(("loss", "1.91"),)),
                    rec(progress=0.07, remaining_seconds=964_400, progress_metrics=(("loss", "1.91"),)),
                    rec(progress=0.07, remaining_seconds=965_000, progress_metrics=(("loss", "1.89"),))):
        assert job_state.progress_moved(before, changed)
    assert job_state.progress_moved(None, same)


def test_progress_text_says_what_was_reported() -> None:
    assert job_state.progress_text(rec(progress=0.62)) == "62%"
    assert job_state.progress_text(rec(progress_metrics=(("loss", "2.1"), ("epoch", "3")))) == "loss=2.1, epoch=3"
    assert job_state.progress_text(rec(remaining_seconds=600)) == "600 s remaining"
