"""The job judgement: a job record and the clock -> is its training process still reporting progress.

Why its own module: explain's job layer, the attention list of ``snapshot`` and the collector's
``gangscope_job_progress_changed_timestamp_seconds`` must agree on what "progress" and "stale"
mean (and when a JobSet restarts), and GangscopeJobProgressStalled renders the same rule in PromQL. The rule, on Kubeflow
Trainer's own clock (kubeflow/trainer 8c0f5059 pkg/apis/trainer/v1alpha1/trainjob_types.go:565-607):

* A job reports progress once its ``trainerStatus`` holds a percentage, an estimate of the
  remaining seconds or metrics: every field but ``lastUpdatedTime`` is optional (:567-592), and the
  status server copies what the training process posts as it comes (pkg/statusserver/server.go:239-263),
  so a process that reports only its loss reports progress as surely as one that sends a
  percentage.
* Its progress moved when any of them changed. What the object keeps is the last report: a hung
  process leaves its last tokens per second and loss in the status, unchanged ("the current
  metrics" as of ``lastUpdatedTime``, :583-588). So a reported value is current only while it
  keeps moving; a job whose report stood still for ``stale_after`` is stale since its last move,
  never "at 100% of its previous hour".
* Not stale: a finished or suspended job (nothing to report), a job that reported 100% (its
  Complete condition follows), a job that has not reported yet (a young job; Trainer writes no
  ``trainerStatus`` until the first report).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .jobs import JobRecord
    from .podgroups import Condition


def restarting(rec: JobRecord) -> Condition | None:
    """The JobSet's ``RestartingJobSet=True`` condition while it recreates its Jobs (jobset 08dfbdfd
    pkg/controllers/failure_policy.go:244-258), else None."""
    c = rec.condition("RestartingJobSet")
    return c if c is not None and c.status == "True" else None


def reports_progress(rec: JobRecord) -> bool:
    """The job's status carries something its training process reported (see the module docstring)."""
    return rec.progress is not None or rec.remaining_seconds is not None or bool(rec.progress_metrics)


def progress_moved(previous: JobRecord | None, rec: JobRecord) -> bool:
    """``rec``'s report differs from ``previous``'s: the percentage, the estimate or a metric."""
    return (previous is None or previous.progress_changed is None or previous.progress != rec.progress
            or previous.remaining_seconds != rec.remaining_seconds or previous.progress_metrics != rec.progress_metrics)


def progress_stale_since(rec: JobRecord, now: float, stale_after: float) -> float | None:
    """When a running job's reported progress last moved, if that is at least ``stale_after``
    before ``now``; else None."""
    if not rec.running or rec.progress_changed is None or not reports_progress(rec):
        return None
    if rec.progress is not None and rec.progress >= 1:
        return None
    return rec.progress_changed if now - rec.progress_changed >= stale_after else None


def progress_text(rec: JobRecord) -> str:
    """What the job last reported, for a sentence: "62%", or its metrics where it sends no percentage."""
    if rec.progress is not None:
        return f"{rec.progress:.0%}"
    if rec.progress_metrics:
        return ", ".join(f"{name}={value}" for name, value in rec.progress_metrics[:3])
    return f"{rec.remaining_seconds} s remaining"
