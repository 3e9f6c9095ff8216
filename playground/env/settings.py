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

from playground.core.errors import PlaygroundError
from playground.env.outbound import ANY_PUBLIC, parse_url

QUEUE_SIZE = 32  # the device queue's places (ui/layout.py's demo.queue): no client or address may hold more
# What sessions keep, all together: on a 24 GB machine the model cache takes 80 % (19.2 GB), Python, Gradio and the
# OS about 2-3 GB, which leaves about 1 GB (docs/reliability.md)
SESSION_MB = 1024

# name -> (default, what it sets): the README's table of the variables is this one
VARIABLES = {
    "PLAYGROUND_CACHE": ("~/.cache/spec-playground", "where the offline packs are assembled and converted"),
    "PLAYGROUND_MODEL_ROOTS": (
        "./models",
        "folders local models may be loaded from (os.pathsep-separated); the cache is always one",
    ),
    "PLAYGROUND_PAIRS_FILE": (
        "",
        'a JSON list of extra pairs: {"name", "draft", "target"}, optional "note" and "drafter"',
    ),
    "PLAYGROUND_DEFAULT_PAIR": (
        "Qwen2.5-Coder 0.5B -> 1.5B (offline)",
        "the pair the app and the benchmark start with",
    ),
    "PLAYGROUND_DEVICE": ("cuda if present, else cpu", "the device models load on"),
    "PLAYGROUND_DTYPE": ("bf16 on CUDA or a CPU with native bf16, else fp32", "the target's default precision"),
    "PLAYGROUND_DRAFT_PRECISION": (
        "int4 on CPU where the batch-invariant kernels run, else int8; the target's on CUDA",
        "the draft's default precision (the default int4 takes int8 for a draft whose shapes int4 refuses; int4 set "
        "here is refused there, saying why)",
    ),
    "PLAYGROUND_MEMORY_GB": ("80 % of the GPU's or the machine's memory", "what the model cache may hold"),
    "PLAYGROUND_FAST_VERIFY": ("1", "0 turns off the short-row-block verify kernel for fp32 targets on CPU"),
    "PLAYGROUND_INVARIANT": (
        "1",
        "0 starts runs on torch's stock bf16 kernels instead of the batch-invariant ones "
        "(docs/exactness.md); the Run tab and the benchmark can still choose",
    ),
    "PLAYGROUND_MAX_NEW_TOKENS": ("1024", "the largest max_new_tokens a run may ask for"),
    "PLAYGROUND_MAX_PROMPT_CHARS": ("20000", "the longest prompt accepted, in characters"),
    "PLAYGROUND_MAX_JOBS_PER_CLIENT": (
        "2",
        "decoding jobs one client (a page, an API session) may have waiting or running, 1 to 32",
    ),
    "PLAYGROUND_MAX_JOBS_PER_ADDRESS": (
        "8",
        "decoding jobs one network address may have waiting or running, all its "
        "clients together (its share of the 32-place queue), 1 to 32",
    ),
    "PLAYGROUND_PROXY_HOPS": (
        "1 on Hugging Face Spaces, else 0",
        "proxies in front of the app that append the "
        "address they saw to X-Forwarded-For; a client's address is the entry this many from the "
        "end (0: the connection's own; docs/reliability.md)",
    ),
    "PLAYGROUND_SESSION_IDLE_S": (
        "900",
        "seconds a session with no job may stay idle before its state and files are "
        "removed, with the messages held for it (a REST call's own session: 30 s after its result was read)",
    ),
    "PLAYGROUND_SESSION_MB": (
        "1024",
        "the memory, in MB, everything sessions keep may take, all sessions together: traces, step-through runs, "
        "downloads, uploads, suffix decoding's memories of earlier runs; over it the least recently used goes first "
        "and its session is told (docs/reliability.md)",
    ),
    "PLAYGROUND_PRELOAD": (
        "1",
        "0: app.py does not prepare, load and warm up the default pair in the background at "
        "start-up (it is then prepared on the first Generate)",
    ),
    "PLAYGROUND_VLLM_VENV": (
        "$PLAYGROUND_CACHE/vllm-venv",
        "the virtual environment with vLLM, for the vLLM peer (scripts/install_vllm.sh)",
    ),
    "PLAYGROUND_VLLM_URLS": (
        "",
        "vLLM servers the Compare pairs tab may reach by URL (comma-separated http(s)://host:port; "
        "* adds any public server); empty: only vLLM started here (docs/reliability.md)",
    ),
    "PLAYGROUND_PACKS_INSTALL": (
        "",
        "set by scripts/launch.sh: the log of the model packs' pip install, run in the background while the page "
        "answers; converting a pack waits for it (its .rc: pip's exit status, .pid: the install's process)",
    ),
    "PLAYGROUND_KERNELS": (
        "auto",
        "which batch-invariant kernels run: auto (the best this CPU runs: "
        "amx where it has AMX-BF16 and the tiles pass their start-up check, else avx512 where it has AVX512-BF16 and "
        "-VNNI, else avx2 where it has AVX2 and FMA, else portable C), one of amx, avx512, avx2, portable to force it, or off (torch's kernels run, the kernel tests skip); a C compiler builds them once",
    ),
}
KERNELS = ("auto", "amx", "avx512", "avx2", "portable", "off")


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
    invariant: bool
    max_new_tokens: int
    max_prompt_chars: int
    max_jobs_per_client: int
    vllm_venv: Path | None
    max_jobs_per_address: int = 8
    proxy_hops: int = 0
    session_idle_s: int = 900
    on_spaces: bool = False  # Hugging Face Spaces sets SPACE_ID
    preload: bool = True
    vllm_urls: tuple[str, ...] = ()  # origins as outbound.Origin writes them, and "*"
    kernels: str = "auto"  # PLAYGROUND_KERNELS: auto, a variant (playground/kernels/ops.py) or off
    packs_install: Path | None = None  # the background install's log (scripts/launch.sh)
    session_mb: float = 1024.0  # what sessions keep, all together (ui/budget.py)


def set_packs_install(log: Path) -> None:
    """PLAYGROUND_PACKS_INSTALL for this process, when app.py installs the packs itself (startup.offer_packs): the
    variable launch.sh sets, which converting a pack waits for (read() then returns it)."""
    os.environ["PLAYGROUND_PACKS_INSTALL"] = str(log)


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

    def whole(name: str, default: int, low: int, high: int) -> int:
        """A whole number from low to high; the message says what to set instead."""
        value = text(name)
        if value is None:
            return default
        if not (value.isascii() and value.isdigit() and low <= int(value[:12]) <= high):
            raise PlaygroundError(
                f"{name} must be a whole number from {low} to {high} (unset: {default}), got {value[:40]!r}."
            )
        return int(value)

    def origins(name: str) -> tuple[str, ...]:
        """A comma-separated list of http(s)://host:port (or *), each checked as the URL field checks one."""
        entries = [e.strip() for e in (text(name) or "").split(",") if e.strip()]
        return tuple(dict.fromkeys(e if e == ANY_PUBLIC else str(parse_url(e, name)) for e in entries))

    kernels = (text("PLAYGROUND_KERNELS") or "auto").lower()
    if kernels not in KERNELS:
        raise PlaygroundError(
            f"PLAYGROUND_KERNELS must be one of {', '.join(KERNELS)} (unset: auto), got {kernels[:40]!r}."
        )
    roots = text("PLAYGROUND_MODEL_ROOTS")
    pairs_file, venv = text("PLAYGROUND_PAIRS_FILE"), text("PLAYGROUND_VLLM_VENV")
    on_spaces = text("SPACE_ID") is not None
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
        invariant=text("PLAYGROUND_INVARIANT") != "0",
        max_new_tokens=int(number("PLAYGROUND_MAX_NEW_TOKENS", int, 1024)),
        max_prompt_chars=int(number("PLAYGROUND_MAX_PROMPT_CHARS", int, 20_000)),
        max_jobs_per_client=whole("PLAYGROUND_MAX_JOBS_PER_CLIENT", 2, 1, QUEUE_SIZE),
        vllm_venv=Path(venv).expanduser() if venv else None,
        max_jobs_per_address=whole("PLAYGROUND_MAX_JOBS_PER_ADDRESS", 8, 1, QUEUE_SIZE),
        proxy_hops=whole("PLAYGROUND_PROXY_HOPS", 1 if on_spaces else 0, 0, 8),
        session_idle_s=whole("PLAYGROUND_SESSION_IDLE_S", 900, 60, 7 * 86_400),
        on_spaces=on_spaces,
        preload=text("PLAYGROUND_PRELOAD") != "0",
        vllm_urls=origins("PLAYGROUND_VLLM_URLS"),
        kernels=kernels,
        packs_install=Path(text("PLAYGROUND_PACKS_INSTALL")) if text("PLAYGROUND_PACKS_INSTALL") else None,
        session_mb=float(whole("PLAYGROUND_SESSION_MB", SESSION_MB, 16, 1_000_000)),
    )
