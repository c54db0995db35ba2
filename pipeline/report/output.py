"""The files a report leaves: report.md (+ plots/*.png), report.html, and the bench.csv it was computed from.

Each file is written to a temporary name and renamed, so a failure never leaves half a report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.analysis.bench_csv import BenchCsv
from pipeline.report import html, markdown
from pipeline.report.document import Document
from pipeline.report.load import Dataset


@dataclass(frozen=True, slots=True)
class Written:
    markdown: Path
    html: Path
    bench_csv: Path
    plots: tuple[Path, ...]


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write(doc: Document, data: Dataset, out: Path) -> Written:
    out.mkdir(parents=True, exist_ok=True)
    plots_dir = out / markdown.PLOTS_DIR
    plots = []
    for fig in doc.figures():
        plots_dir.mkdir(exist_ok=True)
        path = plots_dir / f"{fig.key}.png"
        _replace(path, fig.png)
        plots.append(path)
    md, page, csv_path = out / "report.md", out / "report.html", out / "bench.csv"
    _replace(md, markdown.render(doc).encode("utf-8"))
    _replace(page, html.render(doc).encode("utf-8"))
    tmp = csv_path.with_name("bench.csv.tmp")
    tmp.unlink(missing_ok=True)
    lines = data.csv_lines  # made while the traces were read, where they were
    if lines is None:
        BenchCsv(tmp).append(data.rows)
    else:
        BenchCsv(tmp).append_lines(lines)
    os.replace(tmp, csv_path)
    return Written(md, page, csv_path, tuple(plots))
