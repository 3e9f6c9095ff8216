"""Who a device-queue job belongs to, and fairness between them (ui/jobs.py applies these rules; issue 55):

- the device queue's waiting line is round-robin between network addresses (FairLine), so one address with several
  sessions makes nobody wait more than one of its runs;
- a job being let in counts for its client and address while its validator still checks a vLLM server, and until
  its event is in the queue (Hold), so the per-client and per-address caps hold while checks run.

It reads Gradio's queue Event (session_hash, _id, request, enqueue_time) and replaces the device line's list
(EventQueue.queue) with a FairLine: both in jobs.INTERNALS.
"""

from __future__ import annotations

import time
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable

from playground.env import settings
from playground.ui.common import DECODING

ADMIT_GRACE_S = 2.0  # a job let in counts for its client until its event is in the queue, at most this long


def client_address(http_request: Any) -> str:
    """The network address a request came from. Behind PLAYGROUND_PROXY_HOPS proxies (Hugging Face Spaces: 1) it is
    the entry that many from the end of X-Forwarded-For: each proxy appends the address it saw, so the last entries
    are the trusted proxies' own and a client can only forge those before them. With 0 hops it is the connection's
    address, which uvicorn already reads from X-Forwarded-For when the connection comes from a proxy it trusts
    (FORWARDED_ALLOW_IPS, by default this machine's). Trust assumption: docs/reliability.md."""
    host = getattr(getattr(http_request, "client", None), "host", None)
    hops = settings.read().proxy_hops
    headers = getattr(http_request, "headers", None)
    if hops and headers is not None:
        forwarded = [h.strip() for value in headers.getlist("x-forwarded-for") for h in value.split(",") if h.strip()]
        if len(forwarded) >= hops:
            host = forwarded[-hops]
    return str(host)


def client_of(session_hash: str | None, job_id: str | None, http_request: Any) -> str:
    """A session's hash; for a REST call (gradio names its session after the job, or it has none yet) the address."""
    if session_hash and session_hash != job_id:
        return session_hash
    return f"address {client_address(http_request)}"


# ---------------------------------------------------------------- round-robin between addresses


class FairLine(list):
    """Gradio's waiting line of the device queue, round-robin between addresses: a job joins behind the jobs of its
    round, its round being how many jobs its address has running or waiting, so one address's next job waits
    behind every other address's first (Gradio appends; everything else it does to the line is a list's)."""

    def __init__(self, events: list, running: Callable[[], list]) -> None:
        super().__init__(events)
        self._running = running
        self.joined_at: int | None = None  # where the last job joined (Gradio tells places from there on)

    def append(self, event: Any) -> None:
        seen = Counter(client_address(e.request) for e in self._running())
        address = client_address(event.request)
        mine = seen[address] + sum(client_address(e.request) == address for e in self)
        for at, other in enumerate(self):
            theirs = client_address(other.request)
            if seen[theirs] > mine:
                self.insert(at, event)
                self.joined_at = at
                return
            seen[theirs] += 1
        super().append(event)
        self.joined_at = len(self) - 1


def fair(queue: Any, running: Callable[[], list]) -> None:
    """The device queue's waiting line as a FairLine (`running`: the device's running events), on the event loop
    before a job joins it."""
    line = queue.event_queue_per_concurrency_id.get(DECODING)
    if line is not None and not isinstance(line.queue, FairLine):
        line.queue = FairLine(line.queue, running)
        original = queue.broadcast_estimations

        def broadcast_estimations(concurrency_id: str, after: int | None = None) -> None:
            """Gradio tells their places to the jobs from the last one on (`after`), as if a job always joined at the
            end: a job let in ahead, and every job behind it, must learn theirs too (else its client waits unsure,
            as STARTING). Reads Gradio's Queue.broadcast_estimations."""
            waiting = queue.event_queue_per_concurrency_id[concurrency_id].queue
            if after is not None and isinstance(waiting, FairLine) and waiting.joined_at is not None:
                after, waiting.joined_at = min(after, waiting.joined_at), None
            original(concurrency_id, after)

        queue.broadcast_estimations = broadcast_estimations


# ---------------------------------------------------------------- a place held while a job is let in


@dataclass
class Hold:
    """A job being let in (its validator awaits a check) or just let in: it counts for its client and address until
    its event is in the queue, so the caps hold while checks run."""

    client: str
    address: str
    let_in: float | None = None  # when its validator let it in (time.monotonic, as Gradio's enqueue_time)

    def done(self, admitted: bool) -> None:
        """The validator's verdict: admitted, it counts until its event is seen (ADMIT_GRACE_S at most); else not."""
        self.let_in = time.monotonic()
        if not admitted and self in _holds:
            _holds.remove(self)


_holds: list[Hold] = []


def hold(request: Any) -> Hold:
    """This request's place, counted by held_now() from now on (call its done() with the validator's verdict)."""
    held = Hold(client_of(request.session_hash, None, request.request), client_address(request.request))
    _holds.append(held)
    if (joining := _joining.get()) is not None:
        joining.append(held)
    return held


_joining: ContextVar[list[Hold] | None] = ContextVar("joining", default=None)  # the holds of the push running here


def settle_holds(queue: Any) -> None:
    """A hold taken while a job asks to join (its validator runs inside Queue.push) ends when that push returns: the
    event is then in the queue, where the caps count it, or it was refused. Without this, a job that ended within
    ADMIT_GRACE_S (a quick error) went on counting, and two of them filled a client's cap. Reads Gradio's Queue.push."""
    original = queue.push

    async def push(*args: Any, **kwargs: Any) -> Any:
        mine: list[Hold] = []
        token = _joining.set(mine)
        try:
            return await original(*args, **kwargs)
        finally:
            _joining.reset(token)
            _holds[:] = [h for h in _holds if all(h is not m for m in mine)]

    queue.push = push


def held_now(events: list) -> list[Hold]:
    """The holds still counted besides `events` (the queue's): checking, or let in less than ADMIT_GRACE_S ago with
    no event of their client queued since (each event accounts for one hold)."""
    now, claimed, out = time.monotonic(), set(), []
    _holds[:] = [h for h in _holds if h.let_in is None or now - h.let_in < ADMIT_GRACE_S]
    for h in _holds:
        if h.let_in is not None:
            same = (e for e in events if id(e) not in claimed and e.enqueue_time >= h.let_in)
            seen = next((e for e in same if client_of(e.session_hash, e._id, e.request) == h.client), None)
            if seen is not None:
                claimed.add(id(seen))
                continue
        out.append(h)
    return out
