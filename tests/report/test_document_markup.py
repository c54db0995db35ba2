"""Code spans in the report's words: shown as code in Markdown and HTML, never as escaped backticks."""

from __future__ import annotations

from pipeline.report import html, markdown
from pipeline.report.document import Document, Paragraph, Table, pieces


def test_pieces_split_code_spans_from_words() -> None:
    assert pieces("llama.cpp `timings`, server-side") == [
        ("llama.cpp ", False),
        ("timings", True),
        (", server-side", False),
    ]
    assert pieces("a lone ` backtick") == [("a lone ` backtick", False)]
    assert pieces("") == [("", False)]


def test_markdown_keeps_a_code_span_and_escapes_the_words_around_it() -> None:
    said = markdown.block(Paragraph("run `python -m pipeline.whatif --set x=*2` for *other* changes"))
    assert said == "run `python -m pipeline.whatif --set x=*2` for \\*other\\* changes"
    assert markdown.block(Paragraph("a lone ` stays a backtick")) == "a lone \\` stays a backtick"


def test_a_code_span_in_a_markdown_table_escapes_its_pipes() -> None:
    said = markdown.table(Table("t", ("h",), (("`a|b` c|d",),)))
    assert said.splitlines()[2] == "| `a\\|b` c\\|d |"


def test_html_shows_a_code_span_as_code() -> None:
    said = html.block(Paragraph("llama.cpp `timings` <b>"))
    assert said == "<p>llama.cpp <code>timings</code> &lt;b&gt;</p>"
    assert html.block(Paragraph("`<x>`")) == "<p><code>&lt;x&gt;</code></p>"


def test_no_escaped_backtick_in_a_rendered_report() -> None:
    doc = Document("t", (Paragraph("timings (llama.cpp `timings`, server-side spans)."),), True, True)
    assert "\\`" not in markdown.render(doc)
    assert "`timings`" in markdown.render(doc)
    assert "<code>timings</code>" in html.render(doc)


def test_a_signed_cell_is_not_escaped_but_a_paragraph_that_would_be_a_list_is() -> None:
    assert markdown.table(Table("t", ("change",), (("-89.4",),))).splitlines()[2] == "| -89.4 |"
    assert markdown.block(Paragraph("- not a list")) == "\\- not a list"
