"""The report as a list of blocks, rendered by ``markdown`` and ``html`` alike.

A block's text is plain words, except for code spans: text between a pair of single backticks
(`python -m pipeline.whatif`) is code, shown as code in both renderings (``pieces``); a backtick
without its pair is a backtick.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PLAIN = "plain"
_CODE = re.compile(r"`([^`]+)`")


def pieces(text: str) -> list[tuple[str, bool]]:
    """The text as (piece, is code) in order: the code spans without their backticks, the words between."""
    out: list[tuple[str, bool]] = []
    at = 0
    for found in _CODE.finditer(text):
        if found.start() > at:
            out.append((text[at : found.start()], False))
        out.append((found.group(1), True))
        at = found.end()
    if at < len(text) or not out:
        out.append((text[at:], False))
    return out


WARNING = "warning"
NOTE = "note"


@dataclass(frozen=True, slots=True)
class Heading:
    """A section's heading."""

    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Paragraph:
    """A paragraph of words, plain, a warning or a note."""

    text: str
    tone: str = PLAIN  # plain, warning (a rule not met, a figure to distrust) or note


@dataclass(frozen=True, slots=True)
class Bullets:
    """A list of points."""

    items: tuple[str, ...]
    tone: str = PLAIN


@dataclass(frozen=True, slots=True)
class Table:
    """A table of text cells, found by its ``key``."""

    key: str  # stable name, e.g. "result", for tests and anchors
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""


@dataclass(frozen=True, slots=True)
class Figure:
    """A plot as PNG bytes, with its caption and alternative text."""

    key: str  # file name stem, e.g. "cdf"
    png: bytes
    caption: str
    alt: str


Block = Heading | Paragraph | Bullets | Table | Figure


@dataclass(frozen=True, slots=True)
class Document:
    """The whole report as blocks, before it is rendered as Markdown or HTML."""

    title: str
    blocks: tuple[Block, ...]
    complete: bool  # every measured cell filled, nothing refused, nothing unreadable
    comparable: bool  # False when the comparison was refused (M11)

    def table(self, key: str) -> Table:
        for block in self.blocks:
            if isinstance(block, Table) and block.key == key:
                return block
        raise KeyError(f"no table {key!r}; tables: {', '.join(self.table_keys())}")

    def table_keys(self) -> list[str]:
        return [b.key for b in self.blocks if isinstance(b, Table)]

    def figures(self) -> list[Figure]:
        return [b for b in self.blocks if isinstance(b, Figure)]

    def text(self) -> str:
        """Every heading, paragraph and list item, one per line (for searching in tests)."""
        lines: list[str] = []
        for b in self.blocks:
            if isinstance(b, (Heading, Paragraph)):
                lines.append(b.text)
            elif isinstance(b, Bullets):
                lines.extend(b.items)
        return "\n".join(lines)
