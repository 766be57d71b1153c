"""Exponential backoff with jitter, shared by informers and discovery.

Jitter spreads the retries of many agents (one per GPU node) that all lost the API server at
the same moment, so they do not come back in lock-step. The policy is a value object so tests
can pass millisecond bases and stay fast.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BackoffPolicy:
    base: float = 0.5  # first delay, seconds
    cap: float = 30.0  # largest delay
    factor: float = 2.0
    jitter: float = 0.5  # the delay is drawn from [d * (1 - jitter), d]


@dataclass
class Backoff:
    """Successive delays ``base * factor**n`` (capped, jittered); :meth:`reset` after a success."""

    policy: BackoffPolicy = field(default_factory=BackoffPolicy)
    attempts: int = 0

    def next(self) -> float:
        p = self.policy
        delay = min(p.cap, p.base * p.factor ** min(self.attempts, 64))
        self.attempts += 1
        return delay * (1.0 - p.jitter * random.random())

    def reset(self) -> None:
        self.attempts = 0
