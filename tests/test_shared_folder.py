"""``../shared`` (tests/shared_folder.py): found beside the checkout from any checkout, its paths
required by the tests that read them, a skip without it locally and a failure under CI."""

from __future__ import annotations

from pathlib import Path

import pytest

import shared_folder

# What the suite reads there: the real fixtures (tests/test_clusterqueues.py, and every real
# object through tests/typed_docs.py) and the Kueue controller manager (tests/test_real_kueue_*.py).
READ = [("fixtures", "real", "kueue-and-gangs"), ("fixtures", "real"), ("tools", "kueue", "start.sh"),
        ("tools", "kueue", "stop.sh"), ("tools", "kueue", "kueue")]


@pytest.mark.parametrize("parts", READ, ids=["/".join(p) for p in READ])
def test_the_shared_folder_holds_what_the_suite_reads(parts: tuple[str, ...]) -> None:
    assert shared_folder.require(*parts).exists()


def test_the_folder_is_beside_the_checkout_unless_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(shared_folder.ENV, raising=False)
    assert shared_folder.root() == Path(__file__).resolve().parents[1].parent / "shared"
    monkeypatch.setenv(shared_folder.ENV, str(tmp_path))
    assert shared_folder.root() == tmp_path
    (tmp_path / "here").write_text("")
    assert shared_folder.require("here") == tmp_path / "here"
    assert shared_folder.present("here") == tmp_path / "here" and shared_folder.present("gone") is None


@pytest.mark.parametrize("ci, outcome", [("", pytest.skip.Exception), ("false", pytest.skip.Exception),
                                         ("true", pytest.fail.Exception), ("1", pytest.fail.Exception)])
def test_a_missing_path_skips_locally_and_fails_under_ci(ci: str, outcome: type[BaseException],
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(shared_folder.ENV, str(tmp_path))
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome) as raised:
        shared_folder.require("tools", "kueue", "start.sh")
    assert "needs ../shared/tools/kueue/start.sh" in str(raised.value)
