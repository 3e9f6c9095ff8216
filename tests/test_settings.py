"""Every PLAYGROUND_* variable is read by playground/env/settings.py alone, when it is used (never at import), and
the README's table lists each one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from playground.env import settings
from playground.core.errors import PlaygroundError
from playground.core.config import DecodeConfig
from playground.run.spec import PairSpec, RunSpec, check_max_new_tokens, check_prompt

ROOT = Path(__file__).resolve().parents[1]


def test_an_empty_environment_gives_the_defaults():
    s = settings.read({})
    assert s.cache == Path.home() / ".cache" / "spec-playground" and s.model_roots == (Path("models"),)
    assert s.pairs_file is None and s.default_pair is None and s.device is None and s.dtype is None
    assert s.draft_precision is None and s.memory_gb is None and s.fast_verify is True
    assert (s.max_new_tokens, s.max_prompt_chars, s.max_jobs_per_client) == (1024, 20_000, 2) and s.vllm_venv is None
    assert (s.max_jobs_per_address, s.proxy_hops, s.session_idle_s, s.on_spaces) == (8, 0, 900, False)
    assert settings.read({"SPACE_ID": "someone/playground"}).proxy_hops == 1  # behind Hugging Face's proxy


def test_each_variable_is_read():
    s = settings.read(
        {
            "PLAYGROUND_CACHE": "/c",
            "PLAYGROUND_MODEL_ROOTS": "/a:/b",
            "PLAYGROUND_PAIRS_FILE": "/p.json",
            "PLAYGROUND_DEFAULT_PAIR": "tiny",
            "PLAYGROUND_DEVICE": "cpu",
            "PLAYGROUND_DTYPE": "bf16",
            "PLAYGROUND_DRAFT_PRECISION": "int8",
            "PLAYGROUND_MEMORY_GB": "2.5",
            "PLAYGROUND_FAST_VERIFY": "0",
            "PLAYGROUND_MAX_NEW_TOKENS": "64",
            "PLAYGROUND_MAX_PROMPT_CHARS": "100",
            "PLAYGROUND_MAX_JOBS_PER_CLIENT": "5",
            "PLAYGROUND_MAX_JOBS_PER_ADDRESS": "6",
            "PLAYGROUND_PROXY_HOPS": "2",
            "PLAYGROUND_SESSION_IDLE_S": "120",
        }
    )
    assert s.cache == Path("/c") and s.model_roots == (Path("/a"), Path("/b")) and s.pairs_file == Path("/p.json")
    assert (s.default_pair, s.device, s.dtype, s.draft_precision) == ("tiny", "cpu", "bf16", "int8")
    assert s.memory_gb == 2.5 and s.fast_verify is False
    assert (s.max_new_tokens, s.max_prompt_chars, s.max_jobs_per_client) == (64, 100, 5)
    assert (s.max_jobs_per_address, s.proxy_hops, s.session_idle_s) == (6, 2, 120)
    assert settings.read({"PLAYGROUND_DEVICE": "  ", "PLAYGROUND_CACHE": ""}).device is None  # empty is unset


@pytest.mark.parametrize(
    "name, value",
    [
        ("PLAYGROUND_MAX_NEW_TOKENS", "many"),
        ("PLAYGROUND_MEMORY_GB", "0"),
        ("PLAYGROUND_MAX_JOBS_PER_CLIENT", "1.5"),
        ("PLAYGROUND_MAX_JOBS_PER_CLIENT", "0"),
        ("PLAYGROUND_MAX_JOBS_PER_CLIENT", "abc"),
        ("PLAYGROUND_MAX_JOBS_PER_CLIENT", "33"),
        ("PLAYGROUND_MAX_JOBS_PER_ADDRESS", "-1"),
        ("PLAYGROUND_PROXY_HOPS", "x"),
        ("PLAYGROUND_SESSION_IDLE_S", "5"),
    ],
)
def test_a_bad_value_is_refused_naming_the_variable(name, value):
    with pytest.raises(PlaygroundError, match=name):
        settings.read({name: value})


@pytest.mark.parametrize("value", ["0", "abc"])
def test_a_bad_job_cap_stops_the_app_at_start_up_in_one_line_that_says_what_to_set(value):
    """Issue 29.5: PLAYGROUND_MAX_JOBS_PER_CLIENT of 0 refused every run, and 'abc' stopped the app at start-up with
    a traceback. Now both stop it at start-up with one line: the variable, what it takes, what was given."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PLAYGROUND_MAX_JOBS_PER_CLIENT=value, GRADIO_SERVER_PORT="1")  # never gets to listen
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (
        f"PLAYGROUND_MAX_JOBS_PER_CLIENT must be a whole number from 1 to 32 (unset: 2), got {value!r}"
        in done.stderr.strip().splitlines()[-1]
    )


def test_the_limits_are_read_when_used_not_at_import(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_NEW_TOKENS", "8")
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_CHARS", "5")
    with pytest.raises(PlaygroundError, match="from 1 to 8"):
        check_max_new_tokens(DecodeConfig(max_new_tokens=9).max_new_tokens)
    with pytest.raises(PlaygroundError, match="the limit is 5"):
        check_prompt("too long")
    monkeypatch.delenv("PLAYGROUND_MAX_NEW_TOKENS")
    assert check_max_new_tokens(9) == 9


def test_a_decode_config_is_valid_whatever_the_environment(monkeypatch):
    """core/ reads no environment: the server's limit is the run's to check (RunSpec), not the config's."""
    monkeypatch.setenv("PLAYGROUND_MAX_NEW_TOKENS", "8")
    assert DecodeConfig(max_new_tokens=9).max_new_tokens == 9
    with pytest.raises(PlaygroundError, match="max_new_tokens must be a whole number from 1"):
        DecodeConfig(max_new_tokens=0)
    with pytest.raises(PlaygroundError, match="from 1 to 8"):
        RunSpec(PairSpec("p", "t"), decode=DecodeConfig(max_new_tokens=9), prompt="hi")


ENV_READ = re.compile(r"(?:environ|getenv)\b[^\n]*PLAYGROUND_")


def test_no_other_module_reads_a_playground_variable():
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "playground").rglob("*.py"))
        if p.name != "settings.py" and ENV_READ.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []
    assert ENV_READ.search('os.environ.get("PLAYGROUND_DTYPE")') and not ENV_READ.search("settings.read().dtype")


def test_the_readme_lists_every_variable_once_in_its_table():
    rows = [
        line
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `PLAYGROUND_")
    ]
    assert sorted(re.match(r"\| `(\w+)`", row).group(1) for row in rows) == sorted(settings.VARIABLES)
