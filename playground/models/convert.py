"""One pack's GGUF read, dequantised and saved as safetensors in a process of its own (main: GGUF, OUT, DTYPE,
PARENT_PID). packs._convert starts it, so that the start-up's two packs convert on two cores at once. In one process
they could not: reading a GGUF (gguf's reader parses the vocabulary's 150,000 strings one by one, three times: for
the config, the weights and the tokenizer) is Python code that holds the GIL. A failure's message is the last line of
stdout, after ERROR; the progress bars and warnings go to stderr, the app's log."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

from playground.core.errors import PlaygroundError

ERROR = "ERROR: "
ROOT = Path(__file__).resolve().parents[2]  # the folder that holds playground/, for the child's import path


def in_child(gguf: Path, out: Path, dtype: str) -> None:
    """Run the conversion in a child process and wait for it; its failure raises PlaygroundError with its message.
    The child ends with this process (Linux: it asks the kernel for a signal when its parent dies)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    run = "import sys; from playground.models.convert import main; main(sys.argv[1:])"  # not -m: the package imports it
    command = [sys.executable, "-c", run, str(gguf), str(out), dtype, str(os.getpid())]
    done = subprocess.run(command, check=False, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, env=env)
    if done.returncode != 0:
        said = [line[len(ERROR) :] for line in done.stdout.splitlines() if line.startswith(ERROR)]
        raise PlaygroundError(said[-1] if said else f"the conversion's process ended with status {done.returncode}")


def _end_with(parent: int) -> None:
    """Linux: a SIGTERM when the app's process ends, so a stopped app leaves no conversion running. The kernel sends
    it when the thread that started this process ends: in_child waits in that thread until this process is done."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent ended before the request took effect
        raise SystemExit(1)


def convert(gguf: Path, out: Path, dtype: str) -> None:
    """The GGUF's model (dequantised to `dtype`) and tokenizer, saved to `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=getattr(torch, dtype))
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The GGUF loader dequantises to plain float weights but leaves a quantizer tag that blocks
    # saving; the weights are ordinary tensors now, so drop the tag.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def main(argv: list[str]) -> None:
    gguf, out, dtype, parent = argv
    _end_with(int(parent))
    try:
        convert(Path(gguf), Path(out), dtype)
    except Exception as exc:  # a truncated or foreign file: the parent says so
        print(f"{ERROR}{' '.join(str(exc).split())}", flush=True)
        raise SystemExit(1) from None
