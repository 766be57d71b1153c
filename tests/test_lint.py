"""Lint and layer contracts, run by the suite: ruff's pyflakes checks over the whole tree, and the
import contracts of pyproject.toml's [tool.importlinter] (judgements never import the stores or
the rendering; the agent and the collector are independent; the collector never imports the
simulators). A broken contract names the import chain that breaks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    assert found, f"{name} is not installed: pip install -e '.[test]' (scripts/setup-env)"
    return found


def test_ruff_finds_nothing() -> None:
    out = subprocess.run([_tool("ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_layer_contracts_hold() -> None:
    out = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "3 kept, 0 broken" in out.stdout, out.stdout[-2000:]
