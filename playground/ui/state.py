"""Per-browser-session state (the value of the page's gr.State): the current run, the step-through
run, the session's folder of downloads and what a drafter kind keeps between runs (suffix decoding's memory of
earlier runs). No gradio here: plain objects the callbacks fill in."""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playground import decoding, trace
from playground.core import theory
from playground.engine import SpeculativeDecoder
from playground.models import LoadedPair
from playground.core.records import RoundRecord
from playground.run.spec import RunSpec
from playground.core.sizes import Tally, plain_bytes
from playground.trace.replay import RecordingTokenizer, ReplayTokenizer
from playground.ui import budget

KEEPING = (RecordingTokenizer, ReplayTokenizer)  # tokenizers that keep the texts they answered (the trace's table)

KEEP_DOWNLOADS = 3  # sets of download files kept per session; older ones are removed
RUN, STEP = "your latest run's trace", "your step-through run"  # what the budget's notes call them


@dataclass
class CurrentRun:
    """One generation of the Run tab, as Stop finds it (the generator fills it in place)."""

    spec: RunSpec
    comparing: bool = False  # "Compare with target alone" was ticked
    tokenizer: Any = None
    target_precision: str = ""  # what ran, once loaded: "bf16"
    draft_precision: str | None = None  # the draft model's, when one ran
    invariant: bool = False  # the target ran the batch-invariant kernels: greedy output must be the target's, exactly
    prompt_tokens: int | None = None  # the prompt's length in tokens (its chat template applied); None: not known
    profile: theory.CostProfile | None = None  # the runner's measured costs of this target and drafter
    rounds: list[RoundRecord] = field(default_factory=list)
    baseline: list[RoundRecord] = field(default_factory=list)  # the target alone, when compared
    segments: list[tuple[int, int]] = field(default_factory=list)  # the comparison's interleaving (trace.summarize)
    stopped: bool = False  # set by Stop; the generator then ends without another update
    finished: bool = False  # the generator has shown its final view
    # what its rounds and the baseline's take, each round counted once (nbytes)
    _sizes: tuple[Tally, Tally] = field(default_factory=lambda: (Tally(), Tally()), init=False, repr=False)

    def nbytes(self) -> int:
        """Bytes the run keeps, for the sessions' budget: its rounds and the baseline's (each counted once, when
        first seen: the Run tab counts them as they stream), the texts its tokenizer decoded, its prompt and
        costs. Not the shared tokenizer."""
        tokenizer = self.tokenizer.nbytes() if isinstance(self.tokenizer, KEEPING) else 0
        rounds, baseline = self._sizes
        prompt = plain_bytes(getattr(self.spec, "prompt", None))
        return rounds.of(self.rounds) + baseline.of(self.baseline) + tokenizer + prompt + plain_bytes(self.profile)

    @property
    def baseline_done(self) -> bool:
        """The target-alone run ran to its end (only a complete one is compared)."""
        return bool(self.baseline) and bool(self.baseline[-1].stop)

    def summary(self) -> dict:
        """trace.summarize: with the interleaved baseline once complete, c, v and the predictions are this run's own
        and the measured speedup and the segments' spread appear; before (or without) it, they rest on the runner's
        calibration, and say so."""
        done = self.baseline_done
        return trace.summarize(
            self.rounds, self.baseline if done else None, self.profile, self.segments if done else None
        )


@dataclass
class StepThrough:
    """A step-through run: the decoder waits between rounds for the Next round button."""

    spec: RunSpec
    pair: LoadedPair  # kept in use while a round runs
    decoder: SpeculativeDecoder
    context: list[int] = field(default_factory=list)  # output ids so far
    _context_bytes: Tally = field(default_factory=Tally, init=False, repr=False)  # each id counted once (nbytes)

    @property
    def tokenizer(self) -> Any:
        return self.pair.tokenizer

    def nbytes(self) -> int:
        """Bytes it keeps: the decoder's (SpeculativeDecoder.nbytes: its caches, rounds and drafter) and the output
        (its new ids counted as they come); the pair is shared."""
        return self.decoder.nbytes() + self._context_bytes.of(self.context)


class Downloads:
    """One temporary folder per session for the files it offers for download, inside `root` (the app's: Gradio's
    cache, which serves them without a copy; None: the system's temporary folder); each write goes to a fresh
    subfolder (the browser may still fetch the last one) and only the newest KEEP_DOWNLOADS stay."""

    def __init__(self, root: Path | None = None) -> None:
        self._root = root
        self._folder: Path | None = None
        self._count = 0

    def write(self, files: dict[str, str]) -> list[str]:
        """{file name: text} -> their paths. The names are ours (fixed), never user input."""
        if self._folder is None or not self._folder.is_dir():
            if self._root is not None:
                self._root.mkdir(parents=True, exist_ok=True)
            self._folder = Path(tempfile.mkdtemp(prefix="playground-session-", dir=self._root))
        self._count += 1
        folder = self._folder / str(self._count)
        folder.mkdir(parents=True)  # the session's folder may have been cleaned meanwhile (sessions.clean_files)
        paths = []
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
            paths.append(str(folder / name))
        for old in self._folder.iterdir():
            if old.name.isdigit() and int(old.name) <= self._count - KEEP_DOWNLOADS:
                shutil.rmtree(old, ignore_errors=True)
        return paths

    def nbytes(self) -> int:
        """Bytes of the files kept (Gradio's cache may be a tmpfs: memory)."""
        if self._folder is None:
            return 0
        return sum(f.stat().st_size for f in self._folder.rglob("*") if f.is_file() and not f.is_symlink())

    def close(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


class SessionState:
    """What one browser session keeps between events. root: where its download folder goes (Downloads); ledger: the
    memory budget it is counted in (budget.LEDGER, all sessions together)."""

    is_session = True  # counted with budget.SESSION_BYTES for what Gradio keeps of it

    def __init__(self, root: Path | None = None, ledger: budget.Ledger | None = None) -> None:
        self.run: CurrentRun | None = None  # the Run tab's latest generation
        self.step: StepThrough | None = None  # the Step-through tab's run
        self.stopped_at = 0.0  # when Stop was last pressed (time.monotonic): a run queued before then ends as it starts
        self.stops: dict[str, float] = {}  # the other tabs' Stop: tab -> when it was last pressed (time.monotonic)
        self.downloads = Downloads(root)
        self._kept: dict[Any, Any] = {}  # drafter kind -> its state in this session (kept())
        self._used: dict[Any, float] = {}  # "run", "step", "downloads" or a drafter kind -> last used (monotonic)
        self._notes: list[str] = []  # what the budget dropped, for the next status line (news())
        self.ledger = ledger if ledger is not None else budget.LEDGER

    def kept(self, kind: Any) -> Any:
        """What drafter `kind` keeps between this session's runs, made by its Strategy.session on first use (suffix
        decoding: its memory of earlier runs, drawn on when a run asks); None for a kind that keeps nothing."""
        make = decoding.strategy(kind).session
        if make is None:
            return None
        if kind not in self._kept:
            self._kept[kind] = make()
        self._used[kind] = time.monotonic()
        return self._kept[kind]

    def charge(self, *used: str) -> None:
        """`used` ("run", "step", "downloads") were just used or changed: count this session again in the budget,
        which may drop the least recently used things of any session (news() then says so)."""
        for name in used:
            self._used[name] = time.monotonic()
        self.ledger.charge(self)

    def holdings(self) -> list[budget.Held]:
        """What this session keeps, with sizes, for the budget (a run still streaming is never dropped)."""
        out = []
        run, step = self.run, self.step
        if run is not None and (run.finished or run.stopped):
            out.append(budget.Held(RUN, run.nbytes(), self._used.get("run", 0.0), _drop_run, "run"))
        if step is not None:
            out.append(budget.Held(STEP, step.nbytes(), self._used.get("step", 0.0), _drop_step, "step"))
        files = self.downloads.nbytes()
        if files:
            out.append(
                budget.Held(
                    "your download files", files, self._used.get("downloads", 0.0), _drop_downloads, "downloads"
                )
            )
        for kind, value in list(self._kept.items()):
            size = plain_bytes(value)  # its own nbytes() (suffix decoding's memory: by its nodes)
            about = getattr(value, "about", f"what {getattr(kind, 'value', kind)} keeps between your runs")
            out.append(budget.Held(about, size, self._used.get(kind, 0.0), _dropper(kind), kind))
        return out

    def last_used(self, key: Any, default: float) -> float:
        """When the thing `key` of holdings() was last used (time.monotonic)."""
        return self._used.get(key, default)

    def tell(self, note: str) -> None:
        self._notes.append(note)

    def news(self) -> str:
        """What the budget dropped since the last status line ("" if nothing); said once."""
        notes, self._notes = self._notes, []
        return " ".join(dict.fromkeys(notes))

    def stop(self, tab: str) -> None:
        """Stop pressed on `tab`: its job queued before now ends at its next round (jobs.Listener.check)."""
        self.stops[tab] = time.monotonic()

    def stopped_since(self, tab: str, moment: float) -> bool:
        """Whether Stop was pressed on `tab` at or after `moment` (time.monotonic)."""
        return self.stops.get(tab, -math.inf) >= moment

    def close(self) -> None:
        """The session ended (gr.State's delete_callback): remove its files; the budget counts it no more."""
        self.step = None
        self._kept.clear()  # its earlier runs' outputs go with it
        self.downloads.close()
        self.ledger.forget(self)


# What the budget calls to drop a thing (functions of the session, so that its record never keeps a session alive)


def _drop_run(s: SessionState) -> str:
    size = s.run.nbytes() if s.run is not None else 0
    if s.run is not None and (s.run.finished or s.run.stopped):
        s.run = None
    return budget.note(RUN, size)


def _drop_step(s: SessionState) -> str:
    size = s.step.nbytes() if s.step is not None else 0
    s.step = None
    return budget.note(STEP, size)


def _drop_downloads(s: SessionState) -> str:
    size = s.downloads.nbytes()
    s.downloads.close()
    return budget.note("your download files", size)


def _dropper(kind: Any):
    def drop(s: SessionState) -> str:
        value = s._kept.pop(kind, None)
        if value is None:
            return ""
        size = plain_bytes(value)
        return budget.note(getattr(value, "about", f"what {getattr(kind, 'value', kind)} kept of your runs"), size)

    return drop
