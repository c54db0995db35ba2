"""One name, one meaning (``labtools.naming``): no module name or public class name repeats across the
product's rooms."""

from __future__ import annotations

from pathlib import Path

from labtools.naming import repeated_classes, repeated_modules


def test_no_module_name_repeats_across_rooms() -> None:
    assert not repeated_modules(), repeated_modules()


def test_no_public_class_name_repeats_across_rooms() -> None:
    assert not repeated_classes(), repeated_classes()


def test_the_name_check_sees_a_repeat_and_not_a_re_export(tmp_path: Path) -> None:
    for folder, text in (
        ("pipeline/alpha", "class Speaker:\n    pass\n"),
        ("pipeline/beta", "class Speaker:\n    pass\nclass _Own:\n    pass\n"),
        ("stages/gamma", "from pipeline.alpha.sink import Speaker\nclass _Own:\n    pass\n"),
    ):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "sink.py").write_text(text, encoding="utf-8")
        (tmp_path / folder / "__init__.py").write_text("", encoding="utf-8")
    sinks = ["pipeline/alpha/sink.py", "pipeline/beta/sink.py", "stages/gamma/sink.py"]
    assert repeated_modules(tmp_path) == {"sink": sinks}
    assert repeated_classes(tmp_path) == {"Speaker": sinks[:2]}
