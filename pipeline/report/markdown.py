"""The report as Markdown; figures are linked as ``plots/<key>.png`` files written beside it."""

from __future__ import annotations

from pipeline.report.document import WARNING, Block, Bullets, Document, Figure, Heading, Paragraph, Table

PLOTS_DIR = "plots"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(t: Table) -> str:
    lines = [
        "| " + " | ".join(_cell(h) for h in t.headers) + " |",
        "|" + "|".join("---" for _ in t.headers) + "|",
        *("| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows),
    ]
    if not t.rows:
        lines.append("| " + " | ".join(["(none)", *[""] * (len(t.headers) - 1)]) + " |")
    if t.caption:
        lines.extend(["", f"*{t.caption}*"])
    return "\n".join(lines)


def block(b: Block) -> str:
    if isinstance(b, Heading):
        return f"{'#' * b.level} {b.text}"
    if isinstance(b, Paragraph):
        return f"> **Warning:** {b.text}" if b.tone == WARNING else b.text
    if isinstance(b, Bullets):
        prefix = "- **Warning:** " if b.tone == WARNING else "- "
        return "\n".join(prefix + item for item in b.items)
    if isinstance(b, Table):
        return table(b)
    if isinstance(b, Figure):
        return f"![{b.alt}]({PLOTS_DIR}/{b.key}.png)\n\n*{b.caption}*"
    raise TypeError(f"unknown block {b!r}")


def render(doc: Document) -> str:
    return "\n\n".join(block(b) for b in doc.blocks) + "\n"
