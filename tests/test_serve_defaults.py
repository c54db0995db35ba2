"""``pipeline.serve`` serves xiaozhi devices as the real server does unless told otherwise, and says so in config_id.

The real server end-points with its Silero profile (200 ms of silence) and its ASR is configured with its
users' language; the lab's server takes both as defaults under any config that does not choose otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import serve
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
    assert serve.heard_language(given) == heard


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
