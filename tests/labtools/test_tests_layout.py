"""Tests follow the package layout: every test file in the folder mirroring its package, named for a module."""

from __future__ import annotations

from pathlib import Path

from labtools.tests_layout import misplaced_tests


def test_every_test_file_lives_in_its_packages_folder_named_for_one_of_its_modules() -> None:
    assert misplaced_tests() == []


def _touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")


def test_a_test_in_no_packages_folder_or_named_for_no_module_is_found(tmp_path: Path) -> None:
    for module in ("pipeline/run/turn.py", "pipeline/clock.py", "stages/vad/silero.py", "docs/index.md"):
        _touch(tmp_path / module)
    good = ["tests/run/test_turn.py", "tests/run/test_turn_virtual.py", "tests/stages/vad/test_silero.py"]
    good += ["tests/test_clock.py", "tests/test_docs.py", "tests/test_run.py"]
    bad = ["tests/run/test_turns.py", "tests/stages/test_turn.py", "tests/nowhere/test_turn.py"]
    bad += ["tests/test_silero.py"]
    for test in good + bad:
        _touch(tmp_path / test)
    found = misplaced_tests(tmp_path)
    assert [line.split(":")[0] for line in found] == sorted(bad)
    assert "tests/nowhere/test_turn.py: tests/ mirrors no package at pipeline/nowhere" in found
