"""The report as Markdown; figures are linked as ``plots/<key>.png`` files written beside it."""

from __future__ import annotations

import re

from pipeline.report.document import WARNING, Block, Bullets, Document, Figure, Heading, Paragraph, Table, pieces

PLOTS_DIR = "plots"


# What would turn text (run ids, error messages, settings) into markup: code, emphasis, HTML and
# autolinks, links and images (only where "](" would close a link text), tables' pipes. Underscores
# only where they could open or close emphasis, so setting names stay readable.
_MARKUP = re.compile(r"([\\`*<|~])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\](?=\()")


def escape(text: str, in_table: bool = False) -> str:
    """Text as Markdown shows it, never as markup, but for its code spans (``document.pieces``); one line.
    In a table a code span's pipes are escaped too (GitHub's tables split cells on them before code), and a
    leading sign is left as it is: ``-89.4``, not ``\\-89.4``."""
    out = []
    for piece, code in pieces(text.replace("\n", " ")):
        if code:
            out.append("`" + (piece.replace("|", "\\|") if in_table else piece) + "`")
        else:
            out.append(_MARKUP.sub(lambda m: "\\" + m.group(0), piece))
    escaped = "".join(out)
    # what opens a block (a heading, a list, a quote) only at a line's start: a table cell is no line's start
    return "\\" + escaped if not in_table and escaped.startswith(("#", "-", "+", ">", "=")) else escaped


def _cell(text: str) -> str:
    return escape(text, in_table=True)


def table(t: Table) -> str:
    lines = [
        "| " + " | ".join(_cell(h) for h in t.headers) + " |",
        "|" + "|".join("---" for _ in t.headers) + "|",
        *("| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows),
    ]
    if not t.rows:
        lines.append("| " + " | ".join(["(none)", *[""] * (len(t.headers) - 1)]) + " |")
    if t.caption:
        lines.extend(["", f"*{escape(t.caption)}*"])
    return "\n".join(lines)


def block(b: Block) -> str:
    if isinstance(b, Heading):
        return f"{'#' * b.level} {escape(b.text)}"
    if isinstance(b, Paragraph):
        return f"> **Warning:** {escape(b.text)}" if b.tone == WARNING else escape(b.text)
    if isinstance(b, Bullets):
        prefix = "- **Warning:** " if b.tone == WARNING else "- "
        return "\n".join(prefix + escape(item) for item in b.items)
    if isinstance(b, Table):
        return table(b)
    if isinstance(b, Figure):
        return f"![{escape(b.alt)}]({PLOTS_DIR}/{b.key}.png)\n\n*{escape(b.caption)}*"
    raise TypeError(f"unknown block {b!r}")


def render(doc: Document) -> str:
    return "\n\n".join(block(b) for b in doc.blocks) + "\n"
