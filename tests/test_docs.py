"""The documentation site: built strictly from docs/, every page in its navigation, every link and
anchor found, every code path and test it names present, and nothing it rests on outside the repository.

The strict build is what `make docs` serves; a broken link, a missing anchor or a page left out of
``mkdocs.yml``'s navigation is a warning there, and ``--strict`` makes any warning fail the build.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
DOCS = ROOT / "docs"
# not --quiet: it hides the warnings that --strict counts, and every build would pass
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict"]
# names of the notes the project once kept beside its checkout, spelled so this file does not match itself
OUTSIDE = ("shared" + "/docs", *(name + ".md" for name in ("METHOD", "REFERENCE", "STACK", "DESIGN", "STYLE")))
OUTSIDE += ("XIAOZHI" + "_INTEROP", "HOUSE" + "_REVIEW", "methodology" + ".zh")
# a code span naming a file or folder of the repository, optionally with ::a test or function in it
CODE_PATH = re.compile(
    r"`((?:pipeline|stages|scripts|labtools|tests|configs|audio_fixtures)/[\w./-]*?"
    r"(?:\.py|\.toml|\.txt|\.sh|\.cmake|\.csv|/))(?:::(\w+))?`"
)


def build(config_dir: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the site whose mkdocs.yml is in ``config_dir``, into ``site``."""
    return subprocess.run(
        [*MKDOCS, "-f", str(config_dir / "mkdocs.yml"), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def site_copy(tmp_path: Path) -> Path:
    """mkdocs.yml and docs/ copied under ``tmp_path``, to be broken on purpose."""
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    return tmp_path


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "method.html").is_file()


@pytest.mark.parametrize(
    ("link", "named"),
    [("tasks/no-such-page.md", "no-such-page.md"), ("method.md#m99-no-such-rule", "m99-no-such-rule")],
    ids=["a page that is not there", "an anchor that is not there"],
)
def test_a_broken_link_fails_the_build(tmp_path: Path, link: str, named: str) -> None:
    copy = site_copy(tmp_path / "copy")
    with (copy / "docs" / "index.md").open("a", encoding="utf-8") as page:
        page.write(f"\nSee [what is not there]({link}).\n")
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0
    assert named in done.stdout + done.stderr


def test_a_page_left_out_of_the_navigation_fails_the_build(tmp_path: Path) -> None:
    copy = site_copy(tmp_path / "copy")
    (copy / "docs" / "tasks" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0
    assert "orphan.md" in done.stdout + done.stderr


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    suffixes = {".py", ".md", ".toml", ".txt", ".sh", ".cfg", ".yml", ".yaml", ".cmake", ""}
    return [ROOT / name for name in listed.splitlines() if Path(name).suffix in suffixes and (ROOT / name).is_file()]


def test_nothing_in_the_repository_cites_a_document_outside_it() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {name}"
        for path in tracked_text_files()
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        for name in OUTSIDE
        if name in line
    ]
    assert not found, "cite the page under docs/ instead:\n" + "\n".join(found)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_code_path_and_test_a_page_names_exists(page: Path) -> None:
    missing = []
    for match in CODE_PATH.finditer(page.read_text(encoding="utf-8")):
        path, name = ROOT / match[1], match[2]
        if not path.exists():
            missing.append(match[1])
        elif name and not re.search(rf"^\s*(?:async )?(?:def|class) {name}\b", path.read_text("utf-8"), re.M):
            missing.append(f"{match[1]}::{name}")
    assert not missing, f"{page.relative_to(ROOT)} names what is not there: {missing}"


def test_the_code_path_check_sees_a_missing_file_and_a_missing_test() -> None:
    text = "`pipeline/no_such.py` and `tests/test_docs.py::test_no_such_test` and `tests/test_docs.py::build`"
    found = [(m[1], m[2]) for m in CODE_PATH.finditer(text)]
    assert found == [
        ("pipeline/no_such.py", None),
        ("tests/test_docs.py", "test_no_such_test"),
        ("tests/test_docs.py", "build"),
    ]


def test_the_readme_is_short_and_starts_with_its_two_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) < 250
    commands = [line.split("#")[0].strip() for line in readme[:6] if line.startswith("make ")]
    assert commands == ["make demo", "make test"]
