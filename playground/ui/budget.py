"""One memory budget, in bytes, for everything sessions keep, all sessions together (PLAYGROUND_SESSION_MB).

What counts: each session's kept things (SessionState.holdings(): its latest run's trace, its step-through run and
its KV cache, its download files, what a drafter kind keeps between runs, such as suffix decoding's memory of
earlier runs), the uploads every address holds (sessions.Uploads), and a fixed SESSION_BYTES per session for what
Gradio keeps of it (its copy of the page's config). The shared models are not counted: the model cache has its own
budget (PLAYGROUND_MEMORY_GB).

Each kept thing says its own size (its nbytes()), counted as it grows rather than by a walk of what it reaches: a
run's rounds each once, when first seen (core/sizes.py's Tally); a KV cache by its buffers (engine/cache.py's
kept_bytes); a suffix tree by its nodes (SuffixTree.nbytes); a step-through's decoder adds its drafter's
(Drafter.nbytes). The ledger takes the sizes when a thing changes (charge()). Over the budget, the thing used least
recently goes first, whoever holds it (a run still streaming is never dropped); its session gets a note
(SessionState.news) that its next status line shows.

No gradio here: the ledger is plain data, one per process (LEDGER), like the model cache.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from playground.env import settings

SESSION_BYTES = 200_000  # Gradio's copy of the page's config per session (docs/reliability.md): counted, not dropped
MB = 1_000_000


@dataclass
class Held:
    """One thing kept: what it is (for the note), its size, when it was last used (time.monotonic) and how to drop
    it: drop(holder) returns the note for the holder ("" when there is nobody to tell). drop takes the holder rather
    than closing over it, so that the ledger's record never keeps a holder alive."""

    what: str
    nbytes: int
    used: float
    drop: Callable[[Any], str]
    key: Any = None  # the holder's name for it: its last use is read again when choosing (Holder.last_used)


class Holder(Protocol):
    """A SessionState, or the app's record of uploads."""

    is_session: bool

    def holdings(self) -> list[Held]: ...

    def tell(self, note: str) -> None: ...


class Ledger:
    """The process's count of what sessions keep (module docstring). limit_mb: PLAYGROUND_SESSION_MB unless given."""

    def __init__(self, limit_mb: float | None = None) -> None:
        self._limit_mb = limit_mb
        self._held: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # holder -> its things when last charged
        self._lock = threading.RLock()
        self.dropped: list[tuple[str, int]] = []  # (what, bytes) of every drop, for the soak's report

    def __deepcopy__(self, memo: dict) -> Ledger:
        return self  # Gradio copies a session's state: the copy is counted in the same ledger, not a new one

    @property
    def limit_bytes(self) -> int:
        mb = self._limit_mb if self._limit_mb is not None else settings.read().session_mb
        return int(mb * MB)

    def forget(self, holder: Holder) -> None:
        """The holder ended (a session closed): nothing of it is counted any more."""
        with self._lock:
            self._held.pop(holder, None)

    def held(self, holder: Holder) -> list[Held]:
        """The holder's things as last charged (no count is taken)."""
        with self._lock:
            return list(self._held.get(holder, []))

    def total(self) -> int:
        """Bytes counted now: every holder's things as last charged, and SESSION_BYTES per session."""
        with self._lock:
            items = list(self._held.items())
        return sum(
            SESSION_BYTES * bool(getattr(h, "is_session", False)) + sum(t.nbytes for t in held) for h, held in items
        )

    def charge(self, holder: Holder | None = None) -> list[Held]:
        """Count `holder`'s things again (they changed), then drop the least recently used things of any holder
        while the total is over the budget. Returns what was dropped."""
        with self._lock:
            if holder is not None:
                self._held[holder] = holder.holdings()
            limit, total = self.limit_bytes, self.total()
            if total <= limit:
                return []
            candidates = sorted(((t, h) for h, held in list(self._held.items()) for t in held), key=_last_used)
            dropped = []
            for thing, owner in candidates:
                if total <= limit:
                    break
                told = thing.drop(owner)
                total -= thing.nbytes
                self._held[owner] = [t for t in self._held.get(owner, []) if t is not thing]
                self.dropped.append((thing.what, thing.nbytes))
                dropped.append(thing)
                if told:
                    owner.tell(told)
            return dropped


def _last_used(pair: tuple[Held, Any]) -> float:
    """When a thing was last used: its holder's word now (a session used its memory since it was counted)."""
    thing, owner = pair
    now = getattr(owner, "last_used", None)
    return now(thing.key, thing.used) if now is not None else thing.used


LEDGER = Ledger()


def size(nbytes: int) -> str:
    """Bytes for a reader: "640 kB", "52.3 MB"."""
    return f"{nbytes / 1000:,.0f} kB" if nbytes < MB else f"{nbytes / MB:,.1f} MB"


def line(holder: Holder, ledger: Ledger) -> str:
    """What a session keeps on the server, as the budget last counted it, and the budget all sessions share."""
    held = ledger.held(holder)
    mine = SESSION_BYTES + sum(t.nbytes for t in held)
    parts = [f"{t.what.removeprefix('your ')} {size(t.nbytes)}" for t in held] + [
        f"the page's settings {size(SESSION_BYTES)}"
    ]
    return (
        f"Memory this session keeps on the server: {size(mine)} ({', '.join(parts)}). All sessions together: "
        f"{size(ledger.total())} of the {ledger.limit_bytes / MB:,.0f} MB budget (PLAYGROUND_SESSION_MB); past it, "
        f"the least recently used things go first."
    )


def note(what: str, nbytes: int) -> str:
    """What the session is told: what went, how large it was, and the budget that made it go."""
    return (
        f"To keep the server within its memory budget for sessions ({settings.read().session_mb:,.0f} MB, "
        f"PLAYGROUND_SESSION_MB), {what} ({nbytes / MB:,.1f} MB) was dropped, the least recently used first."
    )


def now() -> float:
    return time.monotonic()
