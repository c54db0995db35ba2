"""What a careful review found, each with its test: bad input costs only itself, secrets stay out of every
record, the report shows data as data, and helpers never hang or leak."""

from __future__ import annotations

import asyncio
import csv
import http.server
import io
import json
import threading
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp import web

from pipeline.analysis.traces import ReadProblems, read_trace_file
from pipeline.endpoints.link import LinkEmulator, get_profile
from pipeline.records import bench_csv
from pipeline.records.bench_csv import BenchCsv, read_bench_csv
from pipeline.records.turn_row import TurnRow
from pipeline.replay import main
from pipeline.report.build import build
from pipeline.report.jaeger import http_get
from pipeline.report.load import LoadError, load_paths
from pipeline.report.markdown import render
from pipeline.run.session import keep_history as _keep
from pipeline.settings.audio import BadAudio, load_audio
from pipeline.settings.config import CloudConfig, Config, LlmConfig
from stages.llm import ChatRequest, Message
from stages.llm.openai import LlmProtocolError, OpenAIChatBackend, OpenAISettings
from tests.fixture_files import make_fixtures
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SIM = ["--config", str(ROOT / "configs" / "simulator.toml"), "--clock", "virtual", "--quiet"]


def test_a_wav_with_an_odd_byte_count_is_bad_audio_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "odd.wav"
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes(bytes(3200))
    path.write_bytes(path.read_bytes()[:-1])  # cut off mid-sample, as a copy that broke off
    with pytest.raises(BadAudio, match=r"odd\.wav"):
        load_audio(path)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_in_a_trace_make_that_line_unreadable_not_the_report(tmp_path: Path, number: str) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1"])
    out = tmp_path / "o"
    assert main([str(fixtures), *SIM, "--rounds", "2", "--out", str(out), "--run-id", "r"], env={}) == 0
    trace = out / "traces" / "r.jsonl"
    lines = trace.read_text().splitlines()
    lines[0] = lines[0].replace('"doubleValue":', f'"doubleValue":{number},"x":', 1)
    trace.write_text("\n".join(lines) + "\n")
    problems = ReadProblems()
    list(read_trace_file(trace, problems))
    assert len(problems.messages) == 1 and "r.jsonl:1" in problems.messages[0]
    build(load_paths([out], ()), draw=False)  # the report is written from what could be read


def test_run_ids_and_messages_are_text_in_markdown_and_formulas_are_defused_in_bench_csv(tmp_path: Path) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1"])
    out = tmp_path / "o"
    evil = "**bold**<img src=x>[link](http://x)$5"
    assert main([str(fixtures), *SIM, "--rounds", "2", "--out", str(out), "--run-id", evil], env={}) == 0
    data = load_paths([out], ())
    markdown = render(build(data, draw=True))  # the plots too: matplotlib reads $...$ as mathematics
    assert evil not in markdown and r"\*\*bold\*\*\<img src=x>[link\](http://x)$5" in markdown
    bench = tmp_path / "b.csv"
    row = TurnRow(run_id="=HYPERLINK(1)", note="-1+2", first_token_ms=-5.0)
    BenchCsv(bench).append([row])
    assert "'=HYPERLINK(1)" in bench.read_text() and ",-5," in bench.read_text()
    [back] = read_bench_csv(bench)
    assert (back.run_id, back.note, back.first_token_ms) == ("=HYPERLINK(1)", "-1+2", -5)


def test_a_stream_parser_error_never_quotes_the_key() -> None:
    key = "sk-lab-abcdefghijklmnopqrstuvwxyz"

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(f'data: {{"choices": "echo {key}"}}\n\n'.encode())
        return resp

    async def main_() -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        try:
            settings = OpenAISettings(base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key_env="K")
            async with OpenAIChatBackend(settings, key) as backend:
                with pytest.raises(LlmProtocolError) as err:
                    async for _ in backend.stream(ChatRequest((Message("user", "hi"),), 8)):
                        pass
                return str(err.value)
        finally:
            await runner.cleanup()

    message = asyncio.run(main_())
    assert "choices" in message and key not in message and key[:8] not in message


def test_credentials_in_base_url_reach_no_record() -> None:
    url = "https://user:s3cret@api.example.com:8443/v1?token=t0ken#frag"
    cfg = Config(llm=LlmConfig(impl="openai"), cloud=CloudConfig(base_url=url))
    recorded = json.dumps(cfg.as_dict())
    assert "s3cret" not in recorded and "t0ken" not in recorded and "user" not in recorded
    assert cfg.as_dict()["cloud"]["base_url"] == "https://api.example.com:8443/v1"
    settings = OpenAISettings(base_url=url, model="m")
    assert "s3cret" not in repr(OpenAIChatBackend(settings)) and "t0ken" not in repr(OpenAIChatBackend(settings))


class _Cut(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b'{"result":')  # and the connection closes: the body broke off

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def cut_server() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Cut)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/v3/traces"
    server.shutdown()
    server.server_close()


def test_a_broken_off_jaeger_answer_is_a_clear_error(cut_server: str) -> None:
    with pytest.raises(LoadError, match="broke off after 10 "):
        http_get(cut_server, 5.0)


def test_a_jaeger_answer_over_the_limit_is_refused(cut_server: str) -> None:
    with pytest.raises(LoadError, match="larger than 4 bytes"):
        http_get(cut_server, 5.0, limit=4)


def test_the_link_emulator_gives_up_on_an_upstream_that_never_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    async def never(*_args: object, **_kw: object) -> tuple[object, object]:
        await asyncio.sleep(3600)
        raise AssertionError

    async def main_() -> bytes:
        async with LinkEmulator(get_profile("lan"), "127.0.0.1", 9, connect_timeout_s=0.2) as link:
            monkeypatch.setattr(asyncio, "open_connection", never)
            reader, writer = await _connect(link.port)  # open_connection itself is the one made to hang
            data = await asyncio.wait_for(reader.read(), 5)  # closed by the emulator, not after an hour
            writer.close()
            return data

    assert asyncio.run(main_()) == b""


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.create_connection(lambda: asyncio.StreamReaderProtocol(reader), "127.0.0.1", port)
    writer = asyncio.StreamWriter(transport, asyncio.StreamReaderProtocol(reader), reader, loop)
    return reader, writer


def test_a_limit_beyond_the_question_set_expects_no_missing_turns(tmp_path: Path) -> None:
    fixtures = make_fixtures(tmp_path / "fx", ["q1", "q2"])
    out = tmp_path / "o"
    assert main([str(fixtures), *SIM, "--rounds", "2", "--limit", "9", "--out", str(out)], env={}) == 0
    doc = build(load_paths([out], ()), draw=False)
    text = " ".join(getattr(b, "text", "") for b in doc.blocks)
    assert "settings ask for" not in text and "expected turns found" not in text


def test_history_keeps_only_the_rounds_that_are_sent() -> None:
    history = [Message("user", str(i)) for i in range(10)]
    assert _keep(history, 0) == []
    assert _keep(history, 2) == history[-4:]


def test_a_row_line_writes_each_cell_as_a_cell_alone_would_be_written() -> None:
    # csv_line_of's cases in one expression (None and int left to the writer) are _cell's
    values: list[object] = [
        None,
        0,
        -3,
        2**70,
        True,
        1.0,
        0.1,
        -2.5,
        1e16,
        1234.5678,
        float("nan"),
        "",
        "a,b",
        'say "hi"',
    ]
    values += [s + "x" for s in bench_csv.FORMULA_START] + ["'=1", "line\nbreak", np.float64(2.25), np.int64(7)]
    reference = io.StringIO()
    csv.writer(reference).writerow([bench_csv._cell(v) for v in values])
    assert bench_csv.csv_line_of(values) == reference.getvalue()


@pytest.mark.parametrize(
    "values",
    [
        [],
        [""],
        ["", ""],
        ["x"],
        [None],
        [None, None],
        [1, 2.5, "plain", None, True],
        ["a,b", 1],
        ["a,b", "c,d,e", ",", 2.5, None, "plain"],
        [",", ""],
        ["no comma", 'a "quote"'],
        ["cr\r", 1],
        ["lf\n", 1],
        ["=1+2", -0.0],
        [" spaced ", "tab\tinside", "semi;colon", "é ü 中文"],
    ],
)
def test_a_row_line_is_what_the_csv_writer_writes(values: list[object]) -> None:
    # lines without a cell to quote are joined without the writer: both paths against the writer itself
    reference = io.StringIO()
    csv.writer(reference).writerow([bench_csv._cell(v) for v in values])
    assert bench_csv.csv_line_of(values) == reference.getvalue()
