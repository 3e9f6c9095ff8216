"""The device queue as the app uses it: how many decoding jobs a client has waiting or running, whether
anybody still listens to a running job, and taking a waiting run out of the queue (Stop before it started).

Every decoding event shares one Gradio queue (common.DECODING, one job at a time). Gradio 6 has no public
API for these questions, so this module (with ui/fair_queue.py, its rules of fairness) is the one place that
reads its internals (INTERNALS); it was written for Gradio GRADIO, and check_gradio() refuses to start on another
(each internal has its test: tests/ui/test_gradio_internals.py). Where there is no queue (a callback called directly, or a ZeroGPU worker)
nothing is refused and nobody is ever gone.

Who a job belongs to: its session (a browser page, a gradio_client Client), or, for a REST call
(`POST /gradio_api/call/<api>`, which brings no session of its own), the client's address; and every job also
counts against its network address (client_address), since a client picks its own session ids. A job whose rest
only waits on a peer server hands the device back (Listener.leave_device) and still counts as its client's.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import anyio.from_thread
import gradio as gr
from gradio.queueing import EventQueue
from gradio.server_messages import ProcessCompletedMessage

from playground.env import settings
from playground.core.errors import Ended
from playground.ui.common import DECODING, status_html
from playground.ui.fair_queue import Hold, client_address, fair, held_now, hold
from playground.ui.fair_queue import client_of as _client
from playground.ui.state import SessionState

GRADIO = "6.31"  # the Gradio whose internals this module reads (requirements.txt pins it)
INTERNALS = (
    "Blocks._queue",
    "Queue.event_queue_per_concurrency_id",
    "EventQueue(id, limit).queue / current_concurrency / start_times_per_fn",
    "Queue.active_jobs",
    "Queue.pending_messages_per_session",
    "Queue.event_ids_to_events",
    "Event._id / session_hash / request / concurrency_id (read again when the job ends) / alive / enqueue_time / fn",
    "StateHolder.session_data[...].blocks_config",
    "ProcessCompletedMessage",
)

# A running job whose messages nobody has taken for this long has no listener (a REST call whose result is
# never fetched, a client that stopped reading): it ends at its next round.
UNREAD_S = 3.0
OFF_DEVICE = "peer-network"  # a decoding job that waits only on a peer server moves here (Listener.leave_device)
BEFORE_START = "Stopped before it started."
STOPPED = "Stopped."
# The API names of each tab's decoding events, which its Stop takes out of the queue.
TAB_EVENTS = {
    "generate": ("generate",),
    "sweep": ("sweep",),
    "compare": ("compare",),
    "challenge": ("challenge",),
    "step": ("step_start", "step_next"),
}


def check_gradio(version: str = gr.__version__) -> None:
    """Refuse to start on a Gradio other than GRADIO: the internals read here may have moved, and the queue
    rules would then fail quietly (a refusal never sent, a run nobody reads never stopped)."""
    if version != GRADIO and not version.startswith(GRADIO + "."):
        raise RuntimeError(
            f"playground/ui/jobs.py reads Gradio {GRADIO}'s internals ({'; '.join(INTERNALS)}); this "
            f"is Gradio {version}. Install gradio=={GRADIO}.* (requirements.txt), or check each "
            f"internal with tests/ui/test_gradio_internals.py and then raise jobs.GRADIO."
        )


class ClientGone(Ended):
    """Nobody listens to this job any more: it ends at the next round (its message is for a late reader)."""


class Stopped(Ended):
    """Stop was pressed (in the page or through the API) while this job waited or ran: it ends at the next round."""


def _queue(request: gr.Request | None) -> Any:
    """Gradio's queue behind a request, or None."""
    try:
        return request.request.app.get_blocks()._queue
    except AttributeError:
        return None


def _jobs(queue: Any, off_device: bool = False) -> tuple[list, list]:
    """(waiting, running) decoding events; with off_device also those that handed the device back (still their
    client's: the caps count them)."""
    ids = (DECODING, OFF_DEVICE) if off_device else (DECODING,)
    line = queue.event_queue_per_concurrency_id.get(DECODING)
    waiting = list(line.queue) if line is not None else []
    running = [e for job in list(queue.active_jobs) if job for e in job if e.concurrency_id in ids]
    return waiting, running


# ---------------------------------------------------------------- admission: a few jobs per client


def refusal(request: gr.Request | None) -> str | None:
    """Why this client may not queue another decoding job now (None: it may)."""
    queue = _queue(request)
    if queue is None:
        return None
    fair(queue, lambda: _jobs(queue)[1])  # round-robin between addresses from now on
    events = [e for line in _jobs(queue, off_device=True) for e in line]  # waiting and running
    held = held_now(events)
    limits = settings.read()
    me = _client(request.session_hash, None, request.request)
    mine = sum(_client(e.session_hash, e._id, e.request) == me for e in events) + sum(h.client == me for h in held)
    if mine >= limits.max_jobs_per_client:  # one client cannot fill the queue (max_size) for everyone
        return (
            f"You already have {mine} runs waiting or running, the most one client may have (so that nobody can "
            f"fill the queue for everyone): wait for one to finish, or press Stop."
        )
    address = client_address(request.request)
    shared = sum(client_address(e.request) == address for e in events) + sum(h.address == address for h in held)
    if shared >= limits.max_jobs_per_address:  # nor can many sessions from one address (their ids are the client's)
        return (
            f"Your network address already has {shared} runs waiting or running, its share of the queue "
            f"({limits.max_jobs_per_address} of {settings.QUEUE_SIZE} places; several clients there count "
            f"together): wait for one to finish, or press Stop."
        )
    return None


def held_place(request: gr.Request | None) -> Hold | None:
    """A place counted for this request while its validator runs on (fair_queue.hold); None where there is no queue."""
    return hold(request) if _queue(request) is not None else None


def admission(inputs: list, shown_on: Any) -> Callable:
    """The `validator=` of a decoding event: it runs when the job asks to join the queue, and refuses it
    (Gradio answers 422; the browser shows the message under `shown_on`, one of `inputs`) beyond
    PLAYGROUND_MAX_JOBS_PER_CLIENT jobs waiting or running."""
    at = inputs.index(shown_on)

    async def admit(request: gr.Request, *values: Any) -> Any:  # on the event loop: no other job joins meanwhile
        message = refusal(request)
        if message is None and (place := held_place(request)) is not None:
            place.done(True)  # counted until its event is in the queue
        verdicts = [gr.validate(message is None or i != at, message or "") for i in range(len(inputs))]
        return verdicts if len(verdicts) > 1 else verdicts[0]  # Gradio wraps a single output itself

    return admit


# ---------------------------------------------------------------- a running job's listener


class Listener:
    """The running decoding job of a request, as its callback sees it. `gone` once its client disconnected
    (Gradio then marks the event not alive), it was cancelled (no longer running), or nobody has taken a
    message of its session for UNREAD_S seconds of `clock`."""

    def __init__(
        self,
        request: gr.Request | None,
        clock: Callable[[], float] = time.monotonic,
        state: SessionState | None = None,
        tab: str = "",
    ) -> None:
        self._queue = _queue(request)
        session = getattr(request, "session_hash", None)
        mine = [e for e in _jobs(self._queue)[1] if e.session_hash == session] if self._queue is not None else []
        self.event = mine[0] if len(mine) == 1 else None  # one decoding job runs at a time
        self._clock = clock
        self._heard, self._backlog = clock(), 0
        # Stop on `tab` (state.stop) from the moment the job joined the queue on ends it
        self._state, self._tab = state, tab
        self._since = self.event.enqueue_time if self.event is not None else time.monotonic()

    @property
    def stopped(self) -> bool:
        """Stop was pressed on the job's tab since it joined the queue."""
        return self._state is not None and self._state.stopped_since(self._tab, self._since)

    def leave_device(self) -> None:
        """Hand the device back: what is left of this job waits only on a peer server (vllm.peer.run_peer's
        off_device). The device queue starts its next job at once; this one stays its client's (the caps count it),
        and Stop and a departure still end it."""
        if self.event is None or self.event.concurrency_id != DECODING:
            return
        try:
            anyio.from_thread.run_sync(_move_off_device, self._queue, self.event)
        except RuntimeError:  # not on one of the event loop's worker threads (a test on the loop's own)
            _move_off_device(self._queue, self.event)

    def queued_before(self, moment: float) -> bool:
        """The job joined the queue before `moment` (time.monotonic); False when not known."""
        return self.event is not None and self.event.enqueue_time < moment

    @property
    def gone(self) -> bool:
        event = self.event
        if event is None:
            return False
        if not event.alive or not any(job and event in job for job in list(self._queue.active_jobs)):
            return True
        messages = self._queue.pending_messages_per_session.get(event.session_hash)
        backlog, now = (messages.qsize() if messages is not None else 0), self._clock()
        if backlog == 0 or backlog < self._backlog:  # a reader took messages
            self._heard = now
        self._backlog = backlog
        return now - self._heard > UNREAD_S

    def check(self) -> None:
        if self.stopped:
            raise Stopped(STOPPED)
        if self.gone:
            raise ClientGone("Stopped: nobody was reading this run's results (the client left, or never read them).")


def _move_off_device(queue: Any, event: Any) -> None:
    """On the event loop: the running `event` counts on OFF_DEVICE's line (no limit) instead of the device's. Gradio
    reads the event's concurrency_id again when the job ends, and frees OFF_DEVICE's count then."""
    lines = queue.event_queue_per_concurrency_id
    device, off = lines[DECODING], lines.setdefault(OFF_DEVICE, EventQueue(OFF_DEVICE, None))
    device.current_concurrency -= 1
    off.current_concurrency += 1
    off.start_times_per_fn.setdefault(event.fn, set()).update(device.start_times_per_fn.pop(event.fn, set()))
    event.concurrency_id = OFF_DEVICE


class Watched:
    """A Runner whose sessions end (ClientGone, Stopped) at the next round once the listener is gone or Stop was
    pressed: each session gets the listener's check (Runner.session's `check`, which the session calls after
    every round); the rest is the runner's own. The tabs hand it to the generate loop and to bench.run_grid in
    the runner's place."""

    def __init__(self, runner: Any, listener: Listener) -> None:
        self._runner, self.listener = runner, listener

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def session(self, *args: Any, **kwargs: Any) -> Any:
        return self._runner.session(*args, check=self.listener.check, **kwargs)


# ---------------------------------------------------------------- Stop before it started


async def withdraw(request: gr.Request | None, api_name: str | tuple[str, ...], outputs: list) -> int:
    """Take this session's waiting `api_name` jobs (one name or several) out of the queue, each answered with
    `outputs` (its output values, already as Gradio sends them) as if it had run. Runs on the event loop without
    awaiting, so the queue cannot start one of them meanwhile. Returns how many."""
    queue = _queue(request)
    if queue is None:
        return 0
    names = (api_name,) if isinstance(api_name, str) else tuple(api_name)
    line = queue.event_queue_per_concurrency_id.get(DECODING)
    taken = [
        e
        for e in (list(line.queue) if line is not None else [])
        if e.session_hash == request.session_hash and e.fn.api_name in names
    ]
    for event in taken:
        line.queue.remove(event)
        queue.event_ids_to_events.pop(event._id, None)
        messages = queue.pending_messages_per_session.get(event.session_hash)
        if messages is not None:  # the browser or client shows these outputs and stops waiting
            messages.put_nowait(
                ProcessCompletedMessage(
                    output={"data": outputs, "is_generating": False}, success=True, event_id=event._id
                )
            )
    return len(taken)


async def stop(request: gr.Request | None, state: SessionState | None, tab: str, outputs: list) -> int:
    """Stop on `tab` (TAB_EVENTS): this session's waiting jobs of the tab leave the queue, answered with `outputs`
    (withdraw), and a running one ends at its next round (state.stop, read by its Listener). Returns how many waited."""
    withdrawn = await withdraw(request, TAB_EVENTS[tab], outputs)
    if state is not None:
        state.stop(tab)
    return withdrawn


def wire_stop(
    button: gr.Button,
    tab: str,
    running: Any,
    state: gr.State,
    status: gr.components.Component,
    outputs: int,
    api_name: str,
    then: Callable[[SessionState], None] | None = None,
) -> None:
    """A tab's Stop, in the page and through the API (`api_name`, the session's own: a gradio_client Client, or a REST
    call that names its session_hash): waiting jobs of the tab never run, a running one ends within a round, and the
    page stops waiting for it (cancels=). `outputs`: how many outputs the tab's job has; `then`: what else Stop
    clears in the session (step-through: its run)."""
    answer = [status_html(BEFORE_START)] + [gr.skip()] * (outputs - 1)

    async def on_stop(session: SessionState | None, request: gr.Request = None) -> str:
        withdrawn = await stop(request, session, tab, answer)  # on the event loop: nothing starts meanwhile
        if then is not None and session is not None:
            then(session)
        return status_html(BEFORE_START if withdrawn else STOPPED, "info")

    button.click(
        on_stop,
        inputs=state,
        outputs=status,
        cancels=running if isinstance(running, list) else [running],
        show_progress="hidden",
        concurrency_limit=None,
        api_name=api_name,
    )


# ---------------------------------------------------------------- what a streamed run leaves in its session


def forget_updates(request: gr.Request | None) -> int:
    """Drop the components a finished job's updates left in its session; how many were dropped.

    Gradio turns every prop update a callback returns (each gr.skip() and gr.update() of a streamed yield)
    into a new component instance and registers it in the session's BlocksConfig, where it stays until the
    session ends, so a session's memory would grow with every run (docs/reliability.md). The page only knows
    the app's own block ids, so every other id in the session's config is one of those leftovers."""
    try:
        blocks = request.request.app.get_blocks()
        session = blocks.state_holder.session_data.get(request.session_hash)
        config = session.blocks_config
    except AttributeError:
        return 0
    known = blocks.blocks
    extra = [key for key in list(config.blocks) if key not in known]
    for key in extra:
        config.blocks.pop(key, None)
        session.config_values.pop(key, None)
    return len(extra)
