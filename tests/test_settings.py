"""Every PLAYGROUND_* variable is read by playground/settings.py alone, when it is used (never at import), and
the README's table lists each one."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from playground import settings
from playground.errors import PlaygroundError
from playground.spec import DecodeConfig, check_prompt

ROOT = Path(__file__).resolve().parents[1]


def test_an_empty_environment_gives_the_defaults():
    s = settings.read({})
    assert s.cache == Path.home() / ".cache" / "spec-playground" and s.model_roots == (Path("models"),)
    assert s.pairs_file is None and s.default_pair is None and s.device is None and s.dtype is None
    assert s.draft_precision is None and s.memory_gb is None and s.fast_verify is True
    assert (s.max_new_tokens, s.max_prompt_chars, s.max_jobs_per_client) == (1024, 20_000, 2) and s.vllm_venv is None


def test_each_variable_is_read():
    s = settings.read({"PLAYGROUND_CACHE": "/c", "PLAYGROUND_MODEL_ROOTS": "/a:/b", "PLAYGROUND_PAIRS_FILE": "/p.json",
                       "PLAYGROUND_DEFAULT_PAIR": "tiny", "PLAYGROUND_DEVICE": "cpu", "PLAYGROUND_DTYPE": "bf16",
                       "PLAYGROUND_DRAFT_PRECISION": "int8", "PLAYGROUND_MEMORY_GB": "2.5", "PLAYGROUND_FAST_VERIFY": "0",
                       "PLAYGROUND_MAX_NEW_TOKENS": "64", "PLAYGROUND_MAX_PROMPT_CHARS": "100",
                       "PLAYGROUND_MAX_JOBS_PER_CLIENT": "5"})
    assert s.cache == Path("/c") and s.model_roots == (Path("/a"), Path("/b")) and s.pairs_file == Path("/p.json")
    assert (s.default_pair, s.device, s.dtype, s.draft_precision) == ("tiny", "cpu", "bf16", "int8")
    assert s.memory_gb == 2.5 and s.fast_verify is False
    assert (s.max_new_tokens, s.max_prompt_chars, s.max_jobs_per_client) == (64, 100, 5)
    assert settings.read({"PLAYGROUND_DEVICE": "  ", "PLAYGROUND_CACHE": ""}).device is None  # empty is unset


@pytest.mark.parametrize("name, value", [("PLAYGROUND_MAX_NEW_TOKENS", "many"), ("PLAYGROUND_MEMORY_GB", "0"),
                                         ("PLAYGROUND_MAX_JOBS_PER_CLIENT", "1.5")])
def test_a_bad_value_is_refused_naming_the_variable(name, value):
    with pytest.raises(PlaygroundError, match=name):
        settings.read({name: value})


def test_the_limits_are_read_when_used_not_at_import(monkeypatch):
    monkeypatch.setenv("PLAYGROUND_MAX_NEW_TOKENS", "8")
    monkeypatch.setenv("PLAYGROUND_MAX_PROMPT_CHARS", "5")
    with pytest.raises(PlaygroundError, match="from 1 to 8"):
        DecodeConfig(max_new_tokens=9)
    with pytest.raises(PlaygroundError, match="the limit is 5"):
        check_prompt("too long")
    monkeypatch.delenv("PLAYGROUND_MAX_NEW_TOKENS")
    assert DecodeConfig(max_new_tokens=9).max_new_tokens == 9


ENV_READ = re.compile(r"(?:environ|getenv)\b[^\n]*PLAYGROUND_")


def test_no_other_module_reads_a_playground_variable():
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "playground").rglob("*.py"))
                 if p.name != "settings.py" and ENV_READ.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
    assert ENV_READ.search('os.environ.get("PLAYGROUND_DTYPE")') and not ENV_READ.search('settings.read().dtype')


def test_the_readme_lists_every_variable_once_in_its_table():
    rows = [line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines() if line.startswith("| `PLAYGROUND_")]
    assert sorted(re.match(r"\| `(\w+)`", row).group(1) for row in rows) == sorted(settings.VARIABLES)
