"""Where the suite finds ``../shared``: the folder beside the checkout that holds what is too big
or not ours to commit (the real fixtures printed by clusters, the upstream Kueue controller
manager with its start script).

The folder is found from this file, never from an absolute path, so any checkout (a worktree, a
CI workspace, a developer's clone) finds the ``shared`` beside it; ``$GANGSCOPE_SHARED`` names
another. A test that needs a path of it calls :func:`require`: without it the test is skipped
with a reason naming ``../shared`` on a developer's machine, and fails under CI (``CI`` set),
which always has the folder: there a skip would pass while testing less.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "GANGSCOPE_SHARED"
CHECKOUT = Path(__file__).resolve().parents[1]


def root() -> Path:
    """``$GANGSCOPE_SHARED``, else ``shared`` beside the checkout."""
    return Path(os.environ.get(ENV) or CHECKOUT.parent / "shared")


def in_ci() -> bool:
    """CI sets ``CI`` (GitHub Actions and GitLab to ``true``); an empty, ``0`` or ``false`` one is not CI."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def present(*parts: str) -> Path | None:
    """The path under the folder, or None when it is missing: for tests that read it as a bonus
    (more real objects) and run without it on the committed copies; test_shared_folder.py says
    that it is missing."""
    path = root().joinpath(*parts)
    return path if path.exists() else None


def require(*parts: str) -> Path:
    """The path under the folder; when missing, skip the calling test (fail under CI)."""
    path = root().joinpath(*parts)
    if path.exists():
        return path
    why = (f"needs ../shared/{'/'.join(parts)} ({path} is missing): the suite reads ../shared beside the "
           f"checkout, or ${ENV} (docs/development.md)")
    if in_ci():
        pytest.fail(f"{why}; CI must have it, so this is a failure, not a skip", pytrace=False)
    pytest.skip(why)
    raise AssertionError("unreachable")  # pytest.skip raises
