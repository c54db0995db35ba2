"""The report as one self-contained HTML file: inline style, figures embedded as PNG data URIs,
no script and nothing fetched from elsewhere."""

from __future__ import annotations

import base64
from html import escape

from pipeline.report.document import (
    NOTE,
    WARNING,
    Block,
    Bullets,
    Document,
    Figure,
    Heading,
    Paragraph,
    Table,
    pieces,
)

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 0.2em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
caption { caption-side: bottom; text-align: left; font-style: italic; color: #555; padding-top: 0.3em; }
.warning { background: #fff3cd; border-left: 4px solid #e0a800; padding: 0.4em 0.8em; }
.note { background: #eef5fb; border-left: 4px solid #5b9bd5; padding: 0.4em 0.8em; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-style: italic; color: #555; }
code { font-family: ui-monospace, monospace; background: #f4f4f4; padding: 0 0.2em; }
"""

_CLASS = {WARNING: ' class="warning"', NOTE: ' class="note"'}


def text(words: str) -> str:
    """Words as HTML: escaped, their code spans (``document.pieces``) as ``<code>``."""
    return "".join(f"<code>{escape(piece)}</code>" if code else escape(piece) for piece, code in pieces(words))


def table(t: Table) -> str:
    head = "".join(f"<th>{text(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(f"<td>{text(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    if not t.rows:
        body = f'<tr><td colspan="{len(t.headers)}">(none)</td></tr>'
    caption = f"<caption>{text(t.caption)}</caption>" if t.caption else ""
    return f'<table id="{escape(t.key)}">{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def figure(f: Figure) -> str:
    data = base64.b64encode(f.png).decode("ascii")
    return (
        f'<figure id="figure-{escape(f.key)}"><img src="data:image/png;base64,{data}" alt="{escape(f.alt)}">'
        f"<figcaption>{text(f.caption)}</figcaption></figure>"
    )


def block(b: Block) -> str:
    if isinstance(b, Heading):
        return f"<h{b.level}>{text(b.text)}</h{b.level}>"
    if isinstance(b, Paragraph):
        return f"<p{_CLASS.get(b.tone, '')}>{text(b.text)}</p>"
    if isinstance(b, Bullets):
        items = "".join(f"<li>{text(item)}</li>" for item in b.items)
        return f"<ul{_CLASS.get(b.tone, '')}>{items}</ul>"
    if isinstance(b, Table):
        return table(b)
    if isinstance(b, Figure):
        return figure(b)
    raise TypeError(f"unknown block {b!r}")


def render(doc: Document) -> str:
    body = "\n".join(block(b) for b in doc.blocks)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(doc.title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )
