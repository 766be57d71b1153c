"""The landing page's jobs worth a look (exporter.cluster.attention), on the demo's scenario: what
explain would call held back or slow, worst first, and none of the healthy jobs."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from exporter import explain
from exporter.cluster.attention import worth_a_look
from exporter.cluster.jobs import DEFAULT_PROGRESS_STALE
from exporter.loader import feed, load_path
from exporter.sim.scenario import build_default

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("dump") / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": build_default(NOW).all_objects()}))
    p = argparse.ArgumentParser()
    explain.add_arguments(p)
    store, gangs, handlers = explain._build(p.parse_args(["x/y", "--from-file", str(path)]))
    feed(store.exposition, handlers, load_path(path).objects, "test")
    return store, gangs


def test_the_worst_first_and_no_healthy_job(loaded: Any) -> None:
    store, gangs = loaded
    flagged = worth_a_look(store.workloads.values(), gangs.gangs.values(), gangs.jobs.jobs.values(),
                           NOW.timestamp(), DEFAULT_PROGRESS_STALE, limit=20)
    assert [(f.namespace, f.name, f.why) for f in flagged] == [
        ("research", "t5-pretrain", "gang partially bound, 16 GPUs idle"),
        ("ml-team", "mixtral-sft", "gang stuck assembling"),
        ("vision", "sam-finetune", "gang stuck assembling"),
        ("ml-team", "gemma-sft", "TrainJob progress stale at 62%"),
        ("ml-team", "gpt-pretrain", "inadmissible"),
        ("ml-team", "llama-70b-sft", "inadmissible"),
        ("research", "whisper-asr", "backoff"),
        ("research", "sd-xl", "admission checks"),
        ("ml-team", "qwen-pretrain", "preempting"),
        ("ml-team", "bert-finetune", "queued"),
    ]
    for f in flagged:  # each is a name explain resolves, and explain finds it held back or slow
        doc = asyncio.run(explain.diagnose(store, gangs, f.namespace, f.name, now=NOW.timestamp()))
        assert doc["verdict"]["status"] in ("held", "slow"), (f, doc["verdict"])


def test_the_list_is_short(loaded: Any) -> None:
    store, gangs = loaded
    assert len(worth_a_look(store.workloads.values(), gangs.gangs.values())) == 8
    assert worth_a_look([], []) == []
