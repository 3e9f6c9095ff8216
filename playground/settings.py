"""Every PLAYGROUND_* environment variable, read here and nowhere else (the README's table lists them).

`read()` parses the environment when it is called, never at import: a launcher, a test or a shell that sets a
variable sees it take effect on the next read. A value that does not parse is refused with a message that names
the variable. What a value means (a precision's aliases, a model root's resolution) stays with the module that
uses it; this one only says what was set.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from playground.errors import PlaygroundError

# name -> (default, what it sets): the README's table of the variables is this one
VARIABLES = {
    "PLAYGROUND_CACHE": ("~/.cache/spec-playground", "where the offline packs are assembled and converted"),
    "PLAYGROUND_MODEL_ROOTS": ("./models", "folders local models may be loaded from (os.pathsep-separated); "
                                           "the cache is always one"),
    "PLAYGROUND_PAIRS_FILE": ("", 'a JSON list of extra pairs: {"name", "draft", "target"}, optional "note" '
                                  'and "drafter"'),
    "PLAYGROUND_DEFAULT_PAIR": ("Qwen2.5-Coder 0.5B -> 1.5B (offline)", "the pair the app and the benchmark start with"),
    "PLAYGROUND_DEVICE": ("cuda if present, else cpu", "the device models load on"),
    "PLAYGROUND_DTYPE": ("bf16 on CUDA or a CPU with native bf16, else fp32", "the target's default precision"),
    "PLAYGROUND_DRAFT_PRECISION": ("int8 on CPU, the target's on CUDA", "the draft's default precision"),
    "PLAYGROUND_MEMORY_GB": ("80 % of the GPU's or the machine's memory", "what the model cache may hold"),
    "PLAYGROUND_FAST_VERIFY": ("1", "0 turns off the short-row-block verify kernel for fp32 targets on CPU"),
    "PLAYGROUND_MAX_NEW_TOKENS": ("1024", "the largest max_new_tokens a run may ask for"),
    "PLAYGROUND_MAX_PROMPT_CHARS": ("20000", "the longest prompt accepted, in characters"),
    "PLAYGROUND_MAX_JOBS_PER_CLIENT": ("2", "decoding jobs one client may have waiting or running in the app"),
    "PLAYGROUND_VLLM_VENV": ("$PLAYGROUND_CACHE/vllm-venv", "the virtual environment with vLLM, for the vLLM peer "
                                                            "(scripts/install_vllm.sh)"),
}


@dataclass(frozen=True)
class Settings:
    """What the environment sets; None where a variable is not set and its default depends on the machine."""

    cache: Path
    model_roots: tuple[Path, ...]
    pairs_file: Path | None
    default_pair: str | None
    device: str | None
    dtype: str | None
    draft_precision: str | None
    memory_gb: float | None
    fast_verify: bool
    max_new_tokens: int
    max_prompt_chars: int
    max_jobs_per_client: int
    vllm_venv: Path | None


def read(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings now (os.environ unless given)."""
    env = os.environ if environ is None else environ

    def text(name: str) -> str | None:
        return (env.get(name) or "").strip() or None

    def number(name: str, cast: Callable[[str], float], default: float | None) -> float | None:
        value = text(name)
        if value is None:
            return default
        try:
            result = cast(value)
        except ValueError:
            raise PlaygroundError(f"{name} must be a number, got {value!r}.") from None
        if not result > 0:
            raise PlaygroundError(f"{name} must be above 0, got {value!r}.")
        return result

    roots = text("PLAYGROUND_MODEL_ROOTS")
    pairs_file, venv = text("PLAYGROUND_PAIRS_FILE"), text("PLAYGROUND_VLLM_VENV")
    return Settings(
        cache=Path(text("PLAYGROUND_CACHE") or Path.home() / ".cache" / "spec-playground"),
        model_roots=tuple(Path(p) for p in roots.split(os.pathsep) if p) if roots else (Path("models"),),
        pairs_file=Path(pairs_file) if pairs_file else None,
        default_pair=text("PLAYGROUND_DEFAULT_PAIR"),
        device=text("PLAYGROUND_DEVICE"),
        dtype=text("PLAYGROUND_DTYPE"),
        draft_precision=text("PLAYGROUND_DRAFT_PRECISION"),
        memory_gb=number("PLAYGROUND_MEMORY_GB", float, None),
        fast_verify=text("PLAYGROUND_FAST_VERIFY") != "0",
        max_new_tokens=int(number("PLAYGROUND_MAX_NEW_TOKENS", int, 1024)),
        max_prompt_chars=int(number("PLAYGROUND_MAX_PROMPT_CHARS", int, 20_000)),
        max_jobs_per_client=int(number("PLAYGROUND_MAX_JOBS_PER_CLIENT", int, 2)),
        vllm_venv=Path(venv).expanduser() if venv else None,
    )
