"""The device queue as the app reads it (playground.ui.jobs), on a stand-in for Gradio's queue: a few jobs
per client, a running job's listener, a waiting run taken out of the queue; and every decoding callback
ending at the next round once nobody listens (the real queue: tests/load)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

import gradio as gr

from playground.env import settings
from playground.ui import build_demo, challenges_tab, jobs, run_tab, step_tab
from playground.ui.common import gradio_progress
from playground.ui.common import DECODING
from playground.ui.compare_tab import run_compare
from playground.ui.state import SessionState
from playground.ui.sweep_tab import THIS_PROMPT, run_sweep
from ui_support import PAIR, controls


@pytest.fixture(autouse=True)
def no_holds_left():
    """No place held by an earlier test's admissions (module state of ui/fair_queue.py)."""
    from playground.ui import fair_queue

    fair_queue._holds.clear()
    yield
    fair_queue._holds.clear()


def event(session: str | None, host: str = "10.0.0.1", api: str = "generate", at: float = 0.0) -> SimpleNamespace:
    """A stand-in for gradio.queueing.Event; session None: a REST call (gradio names its session after it)."""
    e = SimpleNamespace(
        _id=f"job-{id(object())}",
        request=SimpleNamespace(client=SimpleNamespace(host=host)),
        concurrency_id=DECODING,
        alive=True,
        enqueue_time=at,
        fn=SimpleNamespace(api_name=api),
    )
    e.session_hash = session or e._id
    return e


def gradio_queue(waiting=(), running=()) -> SimpleNamespace:
    """A stand-in for Gradio's Queue: its lines, running jobs, and broadcast_estimations, which records from which
    place on it was asked to tell the waiting jobs their places."""
    told = []
    return SimpleNamespace(
        event_queue_per_concurrency_id={DECODING: SimpleNamespace(queue=list(waiting))},
        active_jobs=[list(running) if running else None, None],
        event_ids_to_events={},
        pending_messages_per_session={},
        broadcast_estimations=lambda concurrency_id, after=None: told.append((concurrency_id, after)),
        told=told,
    )


def request(queue, session: str | None, host: str = "10.0.0.1") -> SimpleNamespace:
    """A stand-in for gr.Request: its session and the HTTP request behind it, whose app holds the queue."""
    app = SimpleNamespace(get_blocks=lambda: SimpleNamespace(_queue=queue))
    return SimpleNamespace(session_hash=session, request=SimpleNamespace(app=app, client=SimpleNamespace(host=host)))


# ---------------------------------------------------------------- a few jobs per client


def test_a_client_may_have_at_most_two_decoding_jobs_waiting_or_running():
    queue = gradio_queue(waiting=[event("a"), event("b")], running=[event("a")])
    assert "You already have 2 runs waiting or running" in jobs.refusal(request(queue, "a"))
    assert jobs.refusal(request(queue, "b")) is None and jobs.refusal(request(queue, "c")) is None


def test_rest_calls_bring_no_session_and_count_by_address():
    queue = gradio_queue(waiting=[event(None, "10.0.0.9"), event(None, "10.0.0.9")])
    assert jobs.refusal(request(queue, None, "10.0.0.9")) is not None  # a third POST from the same address
    assert jobs.refusal(request(queue, None, "10.0.0.8")) is None
    assert jobs.refusal(request(queue, "a page", "10.0.0.9")) is None  # a browser page is its own client


def test_forty_sessions_from_one_address_hold_at_most_its_share_of_the_queue():
    """Issue 29.2: the cap counted session ids, which a client picks: 20 sessions x 2 jobs from one address filled the
    32-place queue. Now an address holds at most PLAYGROUND_MAX_JOBS_PER_ADDRESS jobs, whatever its sessions."""
    queue = gradio_queue()
    admitted = []
    for i in range(40):
        for _ in range(2):
            if jobs.refusal(request(queue, f"s{i}", "10.0.0.9")) is None:
                queue.event_queue_per_concurrency_id[DECODING].queue.append(event(f"s{i}", "10.0.0.9"))
                admitted.append(i)
    assert len(admitted) == settings.read().max_jobs_per_address == 8
    assert "Your network address already has 8 runs waiting or running" in jobs.refusal(
        request(queue, "s99", "10.0.0.9")
    )
    assert jobs.refusal(request(queue, "someone else", "10.0.0.8")) is None  # another address still gets in


def test_behind_a_proxy_the_address_is_the_forwarded_one_the_proxy_added(monkeypatch):
    """On Spaces (PLAYGROUND_PROXY_HOPS=1) every connection comes from the proxy: the client is the last entry of
    X-Forwarded-For, which the proxy appended; entries before it are the client's own and may be forged."""
    from starlette.datastructures import Headers

    def http(forwarded: str, peer: str = "10.16.3.80") -> SimpleNamespace:
        return SimpleNamespace(client=SimpleNamespace(host=peer), headers=Headers({"x-forwarded-for": forwarded}))

    assert jobs.client_address(http("1.2.3.4")) == "10.16.3.80"  # no proxy declared: the connection's own
    monkeypatch.setenv("SPACE_ID", "someone/playground")
    assert jobs.client_address(http("1.2.3.4")) == "1.2.3.4"
    assert jobs.client_address(http("6.6.6.6, 1.2.3.4")) == "1.2.3.4"  # a forged first entry changes nothing
    assert jobs.client_address(http("")) == "10.16.3.80"  # no entry: the connection's own
    monkeypatch.setenv("PLAYGROUND_PROXY_HOPS", "2")  # two proxies: the client's is the second from the end
    assert jobs.client_address(http("6.6.6.6, 1.2.3.4, 10.0.0.2")) == "1.2.3.4"


def test_without_a_queue_nothing_is_refused_and_nobody_is_gone():
    assert jobs.refusal(None) is None
    assert jobs.Listener(None).gone is False and not jobs.Listener(None).queued_before(time.monotonic())


def test_the_refusal_shows_under_the_chosen_input():
    queue = gradio_queue(waiting=[event("a"), event("a")])
    admit = jobs.admission(["pair", "prompt", "state"], shown_on="prompt")
    verdicts = asyncio.run(admit(request(queue, "a"), "tiny", "hello", None))
    assert [v["is_valid"] for v in verdicts] == [True, False, True] and "You already have" in verdicts[1]["message"]
    assert all(v["is_valid"] for v in asyncio.run(admit(request(queue, "b"), "tiny", "hello", None)))
    assert asyncio.run(jobs.admission(["state"], shown_on="state")(request(queue, "a"), None))["is_valid"] is False


# ---------------------------------------------------------------- a running job's listener


def test_the_listener_hears_a_client_leave_or_a_cancel():
    mine, other = event("a"), event("b")
    queue = gradio_queue(running=[mine])
    listener = jobs.Listener(request(queue, "a"))
    assert listener.event is mine and not listener.gone
    mine.alive = False  # Gradio saw the client's stream close
    assert listener.gone
    mine.alive = True
    queue.active_jobs = [[other], None]  # cancelled: no longer running
    assert listener.gone


class Clock:
    """A clock the test moves by hand: what the listener reads instead of time.monotonic."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_listener_gives_up_on_messages_nobody_reads():
    mine, clock = event("a"), Clock()
    queue = gradio_queue(running=[mine])
    messages = asyncio.Queue()
    queue.pending_messages_per_session["a"] = messages
    listener = jobs.Listener(request(queue, "a"), clock)
    for _ in range(10):  # a reader takes each round's message before the next round ends: never gone
        messages.put_nowait("round")
        clock.now += jobs.UNREAD_S / 2
        messages.get_nowait()
        assert not listener.gone
    messages.put_nowait("round")
    assert not listener.gone
    clock.now += jobs.UNREAD_S + 0.1  # nobody took it
    messages.put_nowait("round")
    assert listener.gone
    with pytest.raises(jobs.ClientGone, match="nobody was reading"):
        listener.check()


# ---------------------------------------------------------------- Stop before it started


def test_withdraw_takes_this_sessions_waiting_runs_out_and_answers_them():
    mine, sweep, other = event("a"), event("a", api="sweep"), event("b")
    queue = gradio_queue(waiting=[mine, sweep, other])
    queue.pending_messages_per_session["a"] = asyncio.Queue()
    outputs = ["<div>Stopped before it started.</div>", {"__type__": "update"}]
    assert asyncio.run(jobs.withdraw(request(queue, "a"), "generate", outputs)) == 1
    assert queue.event_queue_per_concurrency_id[DECODING].queue == [sweep, other]  # only the Run tab's runs
    answer = queue.pending_messages_per_session["a"].get_nowait()
    assert answer.event_id == mine._id and answer.success and answer.output["data"] == outputs
    assert asyncio.run(jobs.withdraw(None, "generate", outputs)) == 0


class Gone:
    """A listener that lets `rounds` rounds run, then hears that nobody listens; it may have been queued before Stop."""

    def __init__(self, rounds: int = 10**9, queued_at: float = 0.0) -> None:
        self.rounds, self.checks, self.queued_at = rounds, 0, queued_at

    def queued_before(self, moment: float) -> bool:
        return self.queued_at < moment

    def check(self) -> None:
        self.checks += 1
        if self.checks > self.rounds:
            raise jobs.ClientGone("Stopped: nobody was reading this run's results.")


def test_stop_of_a_waiting_run_says_it_stopped_before_it_started(tiny_catalog, runner):
    state = SessionState()
    assert jobs.BEFORE_START in run_tab.stop(state, withdrawn=1).status  # taken out of the queue
    assert "Stopped." in run_tab.stop(state).status and jobs.BEFORE_START not in run_tab.stop(state).status
    views = list(run_tab.generate(runner, state, controls(), False, listener=Gone(queued_at=state.stopped_at - 1)))
    assert len(views) == 1 and jobs.BEFORE_START in views[0].status and state.run.rounds == []
    views = list(run_tab.generate(runner, state, controls(), False, listener=Gone(queued_at=state.stopped_at + 1)))
    assert "Done" in views[-1].status  # queued after the Stop: runs


def test_generate_ends_at_the_next_round_once_nobody_listens(tiny_catalog, runner):
    state = SessionState()
    views = list(run_tab.generate(runner, state, controls(k=1, max_new_tokens=60), True, listener=Gone(rounds=3)))
    assert "nobody was reading" in views[-1].status
    assert len(state.run.rounds) == 3 and not state.run.baseline  # not the round after which it heard, nor any later


def test_sweep_and_comparison_end_at_the_next_round_once_nobody_listens(tiny_catalog, runner):
    listener = Gone(rounds=5)
    status = run_sweep(
        jobs.Watched(runner, listener), SessionState(), controls(max_new_tokens=60), "1 2", "0 1", THIS_PROMPT
    )[0]
    assert "nobody was reading" in status and listener.checks == 6  # of about 4 x 60 rounds
    listener = Gone(rounds=5)
    status = run_compare(
        jobs.Watched(runner, listener),
        SessionState(),
        [PAIR],
        ["draft model", "prompt lookup"],
        controls(max_new_tokens=60),
    )[0]
    assert "nobody was reading" in status and listener.checks == 6


def test_stop_ends_a_running_sweep_comparison_challenge_or_step_start_at_its_next_round(tiny_catalog, runner):
    """Issue 29.3: Stop worked in the browser only (its cancel); through the API, /challenge_stop answered "Stopped."
    and the challenge ran on. Now Stop on a tab marks the session (state.stop) and the tab's job ends at its next
    round, whichever way Stop came."""

    def stopping_after(state: SessionState, tab: str, rounds: int) -> jobs.Listener:
        listener, seen = jobs.Listener(None, state=state, tab=tab), []
        check = listener.check

        def counting() -> None:
            seen.append(1)
            if len(seen) == rounds:
                state.stop(tab)  # Stop pressed while the job runs
            check()

        listener.check, listener.seen = counting, seen
        return listener

    state = SessionState()
    listener = stopping_after(state, "sweep", 5)
    status = run_sweep(jobs.Watched(runner, listener), state, controls(max_new_tokens=60), "1 2", "0 1", THIS_PROMPT)[0]
    assert jobs.STOPPED in status and "status-info" in status and len(listener.seen) == 5
    listener = stopping_after(state, "compare", 3)
    status = run_compare(
        jobs.Watched(runner, listener), state, [PAIR], ["draft model", "prompt lookup"], controls(max_new_tokens=60)
    )[0]
    assert jobs.STOPPED in status and len(listener.seen) == 3
    for effect, rounds in (("batch size", 4), ("context length", 4)):  # the context challenge iterates a decoder
        listener = stopping_after(state, "challenge", rounds)
        status = challenges_tab.run_challenge(
            jobs.Watched(runner, listener),
            state,
            controls(max_new_tokens=40),
            effect,
            "1 2",
            "16 32",
            "fp32",
            "fp32",
            gradio_progress(lambda *a, **k: None, listener.check),
        )[0]
        assert jobs.STOPPED in status and len(listener.seen) == rounds, effect
    stopped = SessionState()
    listener = jobs.Listener(None, state=stopped, tab="step")  # the start joins the queue ...
    stopped.stop("step")  # ... and Stop comes while it waits or loads
    assert jobs.STOPPED in step_tab.step_start(runner, stopped, controls(), listener=listener)[0]
    assert stopped.step is None and jobs.STOPPED in step_tab.step_next(stopped, listener)[0]
    assert "sweep" not in stopped.stops and not jobs.Listener(None, state=stopped, tab="sweep").stopped  # per tab


def test_every_tabs_stop_takes_its_waiting_jobs_out_of_the_queue():
    waiting = [event("a", api=api) for api in ("sweep", "compare", "challenge", "step_start", "step_next", "generate")]
    queue = gradio_queue(waiting=waiting + [event("b", api="sweep")])
    queue.pending_messages_per_session["a"] = asyncio.Queue()
    state = SessionState()
    for tab, taken in (("sweep", 1), ("compare", 1), ("challenge", 1), ("step", 2)):
        assert asyncio.run(jobs.stop(request(queue, "a"), state, tab, ["Stopped before it started."])) == taken
        assert tab in state.stops
    assert [e.fn.api_name for e in queue.event_queue_per_concurrency_id[DECODING].queue] == ["generate", "sweep"]


# ---------------------------------------------------------------- the page


def test_every_decoding_event_is_admitted_per_client_and_shows_its_place_in_the_queue(tiny_catalog, runner):
    demo = build_demo(runner)
    decoding = [fn for fn in demo.fns.values() if fn.concurrency_id == "decoding"]
    assert {fn.api_name for fn in decoding} == {"generate", "step_start", "step_next", "sweep", "compare", "challenge"}
    stops = {fn.api_name: fn for fn in demo.fns.values() if fn.api_name and fn.api_name.endswith("stop")}
    assert set(stops) == {"stop", "sweep_stop", "compare_stop", "challenge_stop", "step_stop"}  # a Stop for every tab
    assert all(fn.concurrency_limit is None and fn.fn.__name__ == "on_stop" for fn in stops.values())
    for fn in decoding:
        assert fn.validator is not None, fn.api_name  # jobs.admission
        assert fn.show_progress in ("full", "minimal"), fn.api_name  # Gradio shows "queue: n/m" while it waits
        for widget in fn.inputs:  # a bad API value reaches our checks (a Gradio check fails before admission)
            if isinstance(widget, (gr.Dropdown, gr.Radio, gr.CheckboxGroup, gr.Slider, gr.Number)):
                assert widget.preprocess("no such value") == "no such value", (fn.api_name, widget.elem_id)
    stop = next(fn for fn in demo.fns.values() if fn.api_name == "stop")
    assert stop.concurrency_limit is None and stop.fn.__name__ == "on_stop"  # runs at once, also while a run waits


# ---------------------------------------------------------------- issue 55: fair between addresses, the device handed back


def test_the_waiting_line_is_round_robin_between_addresses():
    """Issue 55: resubmitting from 4 sessions of one address made others wait about 4 of its runs. Now a job joins
    behind the jobs of its round: another address's first job waits at most the one run of A's that is running."""
    queue = gradio_queue(running=[event("a1", "10.0.0.1")])
    assert jobs.refusal(request(queue, "x", "10.0.0.9")) is None  # the first admission makes the line fair
    line = queue.event_queue_per_concurrency_id[DECODING].queue
    for session, host in [("a2", "1"), ("a3", "1"), ("a4", "1"), ("b1", "2"), ("c1", "3"), ("b2", "2")]:
        line.append(event(session, f"10.0.0.{host}"))
    assert [e.session_hash for e in line] == ["b1", "c1", "a2", "b2", "a3", "a4"]
    line.remove(line[0])  # Gradio takes the first when the device is free, and a withdrawn job leaves
    line.append(event("d1", "10.0.0.4"))
    assert [e.session_hash for e in line] == ["c1", "d1", "a2", "b2", "a3", "a4"]
    queue.broadcast_estimations(DECODING, len(line) - 1)  # Gradio tells places from the last job on...
    assert queue.told == [(DECODING, 1)]  # ...widened to d1's place, let in ahead of four
    queue.broadcast_estimations(DECODING, len(line) - 1)  # a later broadcast with no job let in is Gradio's own
    assert queue.told[-1] == (DECODING, len(line) - 1)


class _Fn:
    """A stand-in for a BlockFunction (hashable, as Gradio keys its start times by it)."""

    api_name = "compare"


def test_a_job_that_hands_the_device_back_lets_the_next_start_and_stays_its_clients():
    """Issue 55: a vLLM server whose completions hang held the device queue for everyone. A comparison hands the
    device back once only the server's network work is left (Listener.leave_device): Gradio's device line counts one
    job fewer, so the next starts, while the job stays its client's and is still heard."""
    from gradio.queueing import EventQueue

    fn = _Fn()
    line = EventQueue(DECODING, 1)
    line.current_concurrency, line.start_times_per_fn[fn] = 1, {5.0}
    running = event("a", api="compare")
    running.fn = fn
    queue = gradio_queue(waiting=[event("a")], running=[running])
    queue.event_queue_per_concurrency_id[DECODING] = line
    line.queue.append(event("a"))
    listener = jobs.Listener(request(queue, "a"))
    listener.leave_device()
    off = queue.event_queue_per_concurrency_id[jobs.OFF_DEVICE]
    assert line.current_concurrency == 0 < line.concurrency_limit  # Gradio's get_events starts the next job now
    assert off.current_concurrency == 1 and off.concurrency_limit is None and off.start_times_per_fn[fn] == {5.0}
    assert running.concurrency_id == jobs.OFF_DEVICE  # what Gradio reads when the job ends, to free its count
    assert fn not in line.start_times_per_fn
    assert "You already have 2 runs" in jobs.refusal(request(queue, "a"))  # still counted for its client
    assert listener.gone is False and listener.event is running
    listener.leave_device()  # twice: nothing more
    assert line.current_concurrency == 0 and off.current_concurrency == 1
