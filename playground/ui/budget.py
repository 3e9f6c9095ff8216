"""One memory budget, in bytes, for everything sessions keep, all sessions together (PLAYGROUND_SESSION_MB).

What counts: each session's kept things (SessionState.holdings(): its latest run's trace, its step-through run and
its KV cache, its download files, what a drafter kind keeps between runs, such as suffix decoding's memory of
earlier runs), the uploads every address holds (sessions.Uploads), and a fixed SESSION_BYTES per session for what
Gradio keeps of it (its copy of the page's config). The shared models are not counted: the model cache has its own
budget (PLAYGROUND_MEMORY_GB).

Counting is a cheap estimate taken when a thing changes (charge()), not a walk of the heap every few seconds:
deep_size() walks plain objects and counts tensors by their storage; suffix memories count their nodes
(SuffixMemory.nbytes). Over the budget, the thing used least recently goes first, whoever holds it (a run still
streaming is never dropped); its session gets a note (SessionState.news) that its next status line shows.

No gradio here: the ledger is plain data, one per process (LEDGER), like the model cache.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

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


def note(what: str, nbytes: int) -> str:
    """What the session is told: what went, how large it was, and the budget that made it go."""
    return (
        f"To keep the server within its memory budget for sessions ({settings.read().session_mb:,.0f} MB, "
        f"PLAYGROUND_SESSION_MB), {what} ({nbytes / MB:,.1f} MB) was dropped, the least recently used first."
    )


# ---------------------------------------------------------------- sizes


def _skipped() -> tuple[type, ...]:
    """Types whose objects are shared, not a session's: the models, tokenizers and loaded pairs, and a model's
    weights in the kernels' forms (kernels.ops.Proj: a lean forward's cache reaches its model's head through one)."""
    import torch
    from transformers import PreTrainedTokenizerBase

    from playground.kernels.ops import Proj
    from playground.models import LoadedPair

    return (torch.nn.Module, PreTrainedTokenizerBase, LoadedPair, Proj, type, type(sys), type(len), type(_skipped))


def deep_size(*objects: Any, limit: int = 2_000_000) -> int:
    """Bytes of objects and all they reach (sys.getsizeof each once; a tensor its storage, once), not counting
    the shared models, tokenizers and pairs (_skipped). At most `limit` objects are walked (a bound on the time)."""
    import torch

    skip = _skipped()
    seen: set[int] = set()
    storages: set[int] = set()
    total = 0
    stack: list[Any] = list(objects)
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, skip) or obj is None:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in storages:
                storages.add(storage.data_ptr())
                total += storage.nbytes()
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, (str, bytes, bytearray, int, float, bool, complex)):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        else:
            stack.extend(_fields(obj))
    return total


def _fields(obj: Any) -> Iterable[Any]:
    """An object's attributes: its __dict__ and __slots__."""
    out: list[Any] = []
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        out.append(attrs)
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(obj, name):
                out.append(getattr(obj, name))
    return out


def now() -> float:
    return time.monotonic()
