"""The files a report leaves: report.md (+ plots/*.png), report.html, and rows.csv, the rows it was computed from.

rows.csv has bench.csv's columns and format, but its own name: where both ends of a turn were read
(a device's traces and its server's), the report folds the server's turn into the device's row
(``facts_of``), where a run's bench.csv and ``python -m pipeline.analyze`` give each its own row;
and a report written into a run's folder must not replace the bench.csv the run wrote.

Each file is written to a temporary name and renamed, so a failure never leaves half a report.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pipeline.records.bench_csv import BenchCsv
from pipeline.report import html, markdown
from pipeline.report.document import Document
from pipeline.report.load import Dataset

ROWS_CSV = "rows.csv"


@dataclass(frozen=True, slots=True)
class Written:
    """The files a report wrote."""

    markdown: Path
    html: Path
    rows_csv: Path
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
    md, page, csv_path = out / "report.md", out / "report.html", out / ROWS_CSV
    _replace(md, markdown.render(doc).encode("utf-8"))
    _replace(page, html.render(doc).encode("utf-8"))
    tmp = csv_path.with_name(ROWS_CSV + ".tmp")
    tmp.unlink(missing_ok=True)
    BenchCsv(tmp).append_lines(data.csv_lines())
    os.replace(tmp, csv_path)
    return Written(md, page, csv_path, tuple(plots))
