"""The HTML report in a real browser: headless Chromium (Debian's ``chromium`` package) opens it,
no console error appears, every plot image has rendered, and a screenshot is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.report.__main__ import main
from tests.paths import TEST_DATA
from tests.report_cdp import chromium_page, chromium_path

DATA = TEST_DATA / "report"

IMAGES = """JSON.stringify([...document.images].map(i => {
  const r = i.getBoundingClientRect();
  return {alt: i.alt, complete: i.complete, w: i.naturalWidth, h: i.naturalHeight, shownW: r.width, shownH: r.height};
}))"""


def test_the_html_report_renders_in_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if chromium_path() is None:
        pytest.fail("chromium is not installed: run `apt-get install chromium` (the test command installs it)")
    assert main([str(DATA / "experiment"), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    page_file = tmp_path / "out" / "report.html"
    with chromium_page(tmp_path / "profile") as page:
        page.open(page_file.resolve().as_uri())
        assert page.evaluate("document.title") == "Voice pipeline latency report"
        images = page.evaluate(IMAGES)
        assert page.errors() == []
        shot = tmp_path / "report.png"
        page.screenshot(shot)
        # the check itself must see errors when there are some
        page.open("data:text/html,<p>x</p><script>console.error('planted error')</script>")
        assert page.errors() == ["console: planted error"]
    found = json.loads(images)
    assert len(found) == 7  # the critical path, the CDFs, three waterfalls, run order, sentences
    for image in found:
        assert image["complete"], image
        assert image["w"] > 0 and image["h"] > 0, image
        assert image["shownW"] > 0 and image["shownH"] > 0, image
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 10_000
