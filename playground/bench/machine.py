"""The machine a benchmark ran on, recorded with its results: the date, the commit, the CPU by name (these machines
vary by session: AMD Zen 4 without AMX, Intel Xeon with AMX), the kernels that ran, the versions."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

import torch

from playground import models
from playground.kernels import ops as kernel_ops


def cpu_name() -> str:
    """lscpu's model name (these machines vary by session), with AMX or not."""
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.machine())
    return name + (" with AMX" if "amx_bf16" in kernel_ops.cpu_flags() else " (no AMX)")


def environment() -> dict:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except OSError:
        commit = ""
    device = models.choose_device()
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else f"{cpu_name()}, {os.cpu_count()} cores",
        "cpu_kernels": kernel_ops.describe(),
        "default_target_precision": models.default_target_precision(device).value,
        "default_draft_precision": models.default_draft_precision(device).value,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "processor": platform.processor() or platform.machine(),
    }
