"""``pipeline.serve`` serves xiaozhi devices as the real server does unless told otherwise, and says so in config_id.

The real server end-points with its Silero profile (200 ms of silence) and its ASR is configured with its
users' language; the lab's server takes both as defaults under any config that does not choose otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import serve
from pipeline.run import server_run
from pipeline.settings.config import load_config
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
SIMULATOR = ROOT / "configs" / "simulator.toml"


def test_every_config_without_its_own_choice_end_points_as_the_real_server(tmp_path: Path) -> None:
    alone = load_config(None, {}, base=serve.SERVE_BASE)
    assert (alone.vad.impl, alone.vad.settings.profile) == ("silero", "xiaozhi-server")
    local = load_config([ROOT / "configs" / "local.toml"], {}, base=serve.SERVE_BASE)  # silero, no profile named
    assert local.vad.settings.profile == "xiaozhi-server"
    lab = tmp_path / "lab.toml"
    lab.write_text('[vad]\nimpl = "silero"\nprofile = "lab"\n')
    assert load_config([lab], {}, base=serve.SERVE_BASE).vad.settings.profile == "lab"  # chosen: kept
    assert load_config([SIMULATOR], {}, base=serve.SERVE_BASE).vad.impl == "energy"  # another VAD: its own


@pytest.mark.parametrize(("given", "heard"), [("zh", "zh"), ("en", "en"), ("auto", ""), ("AUTO", "")])
def test_the_language_the_asr_is_told_is_zh_unless_given_and_auto_names_detection(given: str, heard: str) -> None:
    assert serve.parse_args([]).language == "zh"
    assert server_run.heard_language(given) == heard


def test_the_language_and_every_server_setting_enter_config_id(tmp_path: Path) -> None:
    def config_id(*argv: str) -> str:
        args = serve.parse_args([str(ROOT / "audio_fixtures"), "--config", str(SIMULATOR), *argv])
        args.out = tmp_path / "-".join(argv or ("default",))
        prepared = serve.prepare(args, {}, "run-1")
        prepared.run.engines.close()
        return prepared.run.config_id

    default = config_id()
    assert default == config_id("--language", "zh")
    others = {config_id(*a) for a in (("--language", "auto"), ("--auto-listening", "per-listen"),
                                      ("--no-wake-reply-cache",), ("--max-backlog-s", "10"))}  # fmt: skip
    assert default not in others and len(others) == 4


def test_who_the_doors_let_in_is_the_command_lines_and_the_ota_is_told_it_too() -> None:
    from pipeline.transport.server.told_address import OtaFront
    from pipeline.transport.server.websocket import WebSocketSettings

    devices = ["--allowed-device", "AA:BB:CC:00:11:22", "--allowed-device", "aa_bb_cc_00_11_33"]
    others = ["--allowed-host", "lab.lan", "--allowed-origin", "http://console.lan:8080"]
    args = serve.parse_args([*devices, *others, "--duplicate-connect", "replace"])
    _session, door = serve.server_settings(args, 30.0)
    assert door.allowed_devices == ("AA:BB:CC:00:11:22", "aa_bb_cc_00_11_33")
    assert (door.allowed_hosts, door.allowed_origins) == (("lab.lan",), ("http://console.lan:8080",))
    assert door.duplicate_connect == "replace" and door.admits("aa:bb:cc:00:11:22")
    assert not door.admits("aa:bb:cc:0:0:1")
    told = OtaFront("lab.lan", 8003, "", lambda _m: None).settings(WebSocketSettings(door=door), 8000)
    assert told.door == door  # the OTA gives credentials to the doors' devices only
    assert serve.server_settings(serve.parse_args([]), 30.0)[1].duplicate_connect == "refuse"
