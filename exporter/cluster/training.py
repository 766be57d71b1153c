"""The training process's own numbers, where the job controller already carries them: Kubeflow
Trainer's ``TrainJob.status.trainerStatus.metrics``.

Why read them here: a slowdown is only a slowdown if the job says so. Placement, gang and
interconnect series tell where a job runs and what its links move; the job's own loss, epoch or
tokens per second say whether it trains. Trainer 2.2+ (feature gate TrainJobStatus) lets the
training process push them through the status server into the TrainJob's status, so reading them
needs no change to the job and no scrape of its pods.

Upstream (kubeflow/trainer 8c0f5059 pkg/apis/trainer/v1alpha1/trainjob_types.go):
``TrainerStatus.metrics`` (:583-588) is a list of at most 256 ``Metric`` (:595-607), each a
``name`` ("a user-defined label for the metric, e.g. loss, eval_accuracy", 1-64 characters) and a
``value`` that "must be serialized as a string" (1-64 characters). The status server copies the
request's metrics into the status as they come (pkg/statusserver/server.go:252-258); the
Transformers callback reports loss, learning_rate, epoch and whatever ``compute_metrics`` returns
(docs/user-guides/trainjob-progress.md:127-131), the SDK any ``{name: number}`` map (:156-166).

Each metric whose value parses as a finite number is one series,
``gangscope_job_trainer_metric{namespace, kind, name, metric}``: one series per metric name per
TrainJob, at most 256 (the API's MaxItems), typically 3-6 (loss, learning_rate, epoch, a
throughput). A value that is not a number ("nan" aside, which the series carries as NaN), a
metric without a name, and a second entry of one name are skipped and counted as parse problems
of the TrainJob: the other metrics and every other series of the job are unaffected.
alerts/config.yaml's ``throughput`` mapping turns one of them (``samples_per_second``,
``tokens_per_second``, whatever the job reports) into ``gangscope:job_throughput:...``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..exposition import Family, LabelPairs
from ..fields import Problems, as_list, as_str

# Upstream's bounds (trainjob_types.go:585, :597-598, :603-604).
MAX_METRICS = 256
MAX_NAME = 64

TRAINER_METRIC = Family(
    "gangscope_job_trainer_metric", "gauge",
    "A metric the training process reports in TrainJob status.trainerStatus.metrics (Trainer 2.2+), by its name; "
    "only values that are numbers.",
    ("namespace", "kind", "name", "metric"),
)
FAMILIES = (TRAINER_METRIC,)


def parse_trainer_metrics(trainer: dict[str, Any], problems: Problems) -> tuple[tuple[str, float], ...]:
    """The numeric ``(name, value)`` pairs of ``trainerStatus.metrics``, in the job's order; every
    entry skipped adds one problem naming it (its index and name)."""
    out: list[tuple[str, float]] = []
    seen: set[str] = set()
    raw = as_list(trainer.get("metrics"), "status.trainerStatus.metrics", problems)
    if len(raw) > MAX_METRICS:
        problems.append(f"status.trainerStatus.metrics: {len(raw)} entries, above the API's {MAX_METRICS}; "
                        f"the first {MAX_METRICS} are read")
    for i, entry in enumerate(raw[:MAX_METRICS]):
        where = f"status.trainerStatus.metrics[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: expected an object, got {type(entry).__name__}")
            continue
        m = entry
        name = as_str(m.get("name"), f"{where}.name", problems)
        if not name or len(name) > MAX_NAME:
            problems.append(f"{where}.name: {name!r} is not a name of 1-{MAX_NAME} characters")
            continue
        if name in seen:
            problems.append(f"{where}: metric {name!r} given twice; the first is kept")
            continue
        value = _number(m.get("value"))
        if value is None:
            problems.append(f"{where}: metric {name!r} has value {m.get('value')!r}, not a number")
            continue
        seen.add(name)
        out.append((name, value))
    return tuple(out)


def _number(value: Any) -> float | None:
    """A metric value as upstream stores it (a string) or as a hand-edited dump may hold it (a
    JSON number); infinities are refused (no rate of them means anything)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return None if math.isinf(number) else number


def metric_lines(lead: LabelPairs, metrics: Sequence[tuple[str, float]]) -> list[bytes]:
    """The job's ``gangscope_job_trainer_metric`` lines (``lead``: namespace, kind, name)."""
    return [TRAINER_METRIC.line(lead, value, (name,)) for name, value in metrics]
