"""B0's measured answers, question by question, and the question set derived from them: the same audio,
``text`` = B0's transcript (the key the emulated cloud looks answers up by), ``answer`` = B0's words."""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.analysis.numbers import measured
from pipeline.analysis.read import read_traces, reread_with_server
from pipeline.analysis.traces import ReadSpan
from pipeline.endpoints.cloud.answers import pick_tool
from pipeline.tracing import names
from stages.llm.prompts import DEVICE_TOOLS

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "audio_fixtures"
EMULATOR = "fast-70b-api"
_CJK = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")


@dataclass
class Observed:
    """One question's measured turns in B: what each heard, said and called."""

    transcripts: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def manifest_rows() -> list[dict[str, str]]:
    with (FIXTURES / "manifest.csv").open(encoding="utf-8-sig", newline="") as fh:
        return list(csv.DictReader(fh))


def question_set(dest: Path, rows: Sequence[dict[str, str]]) -> Path:
    """A fixtures folder of ``rows``: their audio symlinked from audio_fixtures/, a manifest of them."""
    dest.mkdir(parents=True)
    for row in rows:
        audio = row.get("audio") or f"{row['id']}.wav"
        (dest / audio).symlink_to(FIXTURES / audio)
    with (dest / "manifest.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return dest


def joined(sentences: Sequence[str]) -> str:
    """The answer the sentences were cut from: no space where either side is Chinese (the splitter
    strips the space it cuts at, and a Chinese answer has none)."""
    out = ""
    for s in (s.strip() for s in sentences):
        out += ("" if not out or _CJK.match(out[-1]) or _CJK.match(s[:1]) else " ") + s
    return out


def observe(files: Sequence[Path]) -> dict[str, Observed]:
    """B's measured turns (warm-up left out, M6), question by question: read as every reader reads
    (``read_traces``), each successful turn's spans read again for what it heard, said and called (a
    device's turn read with its server's: the server's spans, where its stages ran)."""
    read = read_traces(files)
    out: dict[str, Observed] = {}
    for facts in read.facts:
        row = facts.row
        if not measured(row):
            continue
        seen = out.setdefault(row.question_id, Observed())
        found = reread_with_server(facts) if row.ok else None
        if found is None:
            seen.failed.append(row.error or "its spans could not be read again")
            continue
        t = found[1] or found[0]
        asr = t.first(names.ASR)
        seen.transcripts.append(str(asr.attributes.get(names.TRANSCRIPT) or "") if asr else "")
        sentences = sorted(t.spans(names.SENTENCE), key=_index)
        seen.answers.append(joined([str(s.attributes.get(names.SENTENCE_TEXT) or "") for s in sentences]))
        called = [*t.spans(names.LLM_CALL), *t.spans(names.TOOL)]
        seen.tools += sorted({str(s.attributes[names.TOOL_NAME]) for s in called if names.TOOL_NAME in s.attributes})
    for message in read.problems:
        print(f"warning: {message}")
    return out


def _index(span: ReadSpan) -> int:
    value = span.attributes.get(names.SENTENCE_INDEX)
    return value if isinstance(value, int) else 0


def most_common(values: Sequence[str], what: str, qid: str) -> str:
    counts = Counter(values)
    if len(counts) > 1:
        print(f"  {qid}: B's {what} differ across measured rounds: {dict(counts)}; using the most common")
    return counts.most_common(1)[0][0]


def choose(observed: dict[str, Observed]) -> dict[str, tuple[str, str]]:
    """question id -> (transcript, answer) for the questions A can answer with B's words."""
    offered = {t.name for t in DEVICE_TOOLS}
    kept: dict[str, tuple[str, str]] = {}
    print("\nB's answers, question by question (measured rounds):")
    for qid, seen in observed.items():
        if seen.failed:
            print(
                f"  {qid}: {len(seen.failed)} measured turn(s) failed ({', '.join(seen.failed)}): counted, no path (M7)"
            )
        if not seen.answers:
            print(f"  {qid}: left out: no successful measured turn in B")
            continue
        if seen.tools:
            print(
                f"  {qid}: left out: B's model called {', '.join(sorted(set(seen.tools)))} and then said "
                f"{seen.answers[0]!r}; after any tool the emulated cloud says its fixed TOOL_DONE"
            )
            continue
        transcript = most_common(seen.transcripts, "transcripts", qid)
        answer = most_common(seen.answers, "answers", qid)
        tool = pick_tool(transcript, offered)
        if tool is not None:
            print(f"  {qid}: left out: the emulated cloud would call {tool[0]} on {transcript!r}; B answered in words")
            continue
        if not answer:
            print(f"  {qid}: left out: B's answer has no sentence")
            continue
        alike = "one measured turn" if len(seen.answers) == 1 else f"{len(seen.answers)} measured turns"
        print(f"  {qid}: kept ({alike}): {transcript!r} -> {answer!r}")
        kept[qid] = (transcript, answer)
    return kept


def a_config(path: Path, profile: str, max_tokens: int) -> Path:
    path.write_text(
        f'[llm]\nimpl = "openai"\nmodel = "emulated-cloud"\nmax_tokens = {max_tokens}\n'
        f'[cloud]\nemulator = "{EMULATOR}"\nemulator_answers = true\n[network]\nprofile = "{profile}"\n',
        encoding="utf-8",
    )
    return path
