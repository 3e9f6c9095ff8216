"""Each Gradio internal that playground/ui/jobs.py and sessions.py read (their INTERNALS), on the installed Gradio
and a real Blocks with its queue: when Gradio is upgraded (and jobs.GRADIO raised), these say which internal moved.
And the start-up check that refuses any other Gradio."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import gradio as gr
import pytest
from gradio import queueing
from gradio.server_messages import ProcessCompletedMessage

from playground.ui import jobs
from playground.ui.common import DECODING


@pytest.fixture(scope="module")
def demo() -> gr.Blocks:
    """A page with one decoding event, queued as the app's (not launched)."""
    with gr.Blocks() as page:
        box = gr.Textbox()
        gr.Button().click(lambda x: x, box, box, api_name="generate", concurrency_id=DECODING)
    return page.queue(default_concurrency_limit=1, max_size=4)


def request(demo: gr.Blocks, session: str | None, host: str = "10.0.0.1") -> gr.Request:
    """A gr.Request as Gradio builds one: the HTTP request behind it, whose app holds the Blocks."""
    return gr.Request(request=SimpleNamespace(app=demo.app, client=SimpleNamespace(host=host)), session_hash=session)


def event(demo: gr.Blocks, session: str | None, host: str = "10.0.0.1") -> queueing.Event:
    fn = next(f for f in demo.fns.values() if f.api_name == "generate")
    return queueing.Event(session, fn, request(demo, session, host).request, None)


def test_the_installed_gradio_is_the_one_jobs_was_written_for():
    jobs.check_gradio()  # no error
    assert gr.__version__.startswith(jobs.GRADIO + ".")


def test_another_gradio_is_refused_at_start_up_with_what_to_do():
    for version in ("6.32.0", "7.0.0", "6.3.1"):
        with pytest.raises(RuntimeError, match=rf"reads Gradio {jobs.GRADIO}'s internals.*this is Gradio {version}"):
            jobs.check_gradio(version)
    jobs.check_gradio(jobs.GRADIO + ".9")  # a patch release of the same minor version is accepted


def test_the_queue_is_reached_from_a_request_through_its_app(demo):
    assert jobs._queue(request(demo, "a")) is demo._queue and isinstance(demo._queue, queueing.Queue)


def test_an_event_carries_what_the_rules_read(demo):
    e = event(demo, "a", host="10.0.0.7")
    assert isinstance(e._id, str) and e.session_hash == "a" and e.concurrency_id == DECODING
    assert e.alive is True and isinstance(e.enqueue_time, float) and e.fn.api_name == "generate"
    assert jobs._client(e.session_hash, e._id, e.request) == "a"
    rest = event(demo, None, host="10.0.0.7")  # a REST call: Gradio names its session after the event
    assert (
        rest.session_hash == rest._id and jobs._client(rest.session_hash, rest._id, rest.request) == "address 10.0.0.7"
    )


def test_waiting_and_running_events_are_read_from_the_queue(demo):
    queue = demo._queue
    queue.create_event_queue_for_fn(next(f for f in demo.fns.values() if f.api_name == "generate"))
    waiting, running = [event(demo, "a"), event(demo, "b")], event(demo, "a")
    line = queue.event_queue_per_concurrency_id[DECODING]
    line.queue[:] = waiting
    saved, queue.active_jobs = queue.active_jobs, [[running], None]
    try:
        assert jobs._jobs(queue) == (waiting, [running])
        assert (
            "You already have 2 runs" in jobs.refusal(request(demo, "a")) and jobs.refusal(request(demo, "b")) is None
        )
        listener = jobs.Listener(request(demo, "a"))
        assert listener.event is running and not listener.gone
        queue.pending_messages_per_session["a"] = asyncio.Queue()  # what Gradio holds per session: a message queue
        assert not listener.gone
    finally:
        line.queue.clear()
        queue.active_jobs = saved
        queue.pending_messages_per_session.pop("a", None)


def test_a_waiting_event_is_withdrawn_and_answered_as_gradio_answers_a_finished_one(demo):
    queue = demo._queue
    queue.create_event_queue_for_fn(next(f for f in demo.fns.values() if f.api_name == "generate"))
    mine = event(demo, "s")
    queue.event_queue_per_concurrency_id[DECODING].queue[:] = [mine]
    queue.event_ids_to_events[mine._id] = mine
    queue.pending_messages_per_session["s"] = asyncio.Queue()
    try:
        assert asyncio.run(jobs.withdraw(request(demo, "s"), "generate", ["done"])) == 1
        answer = queue.pending_messages_per_session["s"].get_nowait()
        assert isinstance(answer, ProcessCompletedMessage) and answer.event_id == mine._id
        assert answer.success and answer.output == {"data": ["done"], "is_generating": False}
        assert mine._id not in queue.event_ids_to_events and not queue.event_queue_per_concurrency_id[DECODING].queue
    finally:
        queue.pending_messages_per_session.pop("s", None)


def test_a_sessions_leftover_components_are_found_in_its_blocks_config(demo):
    session = demo.state_holder["leftovers"]  # what Gradio keeps per browser session
    known = len(demo.blocks)
    assert set(session.blocks_config.blocks) == set(demo.blocks) and set(session.config_values) == set(demo.blocks)
    session.blocks_config.blocks[10**6] = object()  # an update's component instance
    session.config_values[10**6] = {}
    assert jobs.forget_updates(request(demo, "leftovers")) == 1
    assert len(session.blocks_config.blocks) == len(session.config_values) == known


def test_what_the_session_reaper_reads_is_where_sessions_expects_it(demo):
    """sessions.INTERNALS: the sessions Gradio holds and when each was last used, a session's state values and their
    blocks, the per-session queue records, the files Gradio records, and the app's state for the upload record."""
    import datetime
    import threading

    holder = demo.state_holder
    session = holder["reaped"]
    assert isinstance(holder.time_last_used["reaped"], datetime.datetime) and isinstance(
        holder.lock, type(threading.Lock())
    )
    assert list(holder.session_data)[-1] == "reaped"  # least recently used first
    assert isinstance(session.state_data, dict) and set(session.blocks_config.blocks) == set(demo.blocks)
    queue = demo._queue
    assert isinstance(queue.event_analytics, dict) and isinstance(queue.pending_event_ids_session, dict)
    assert hasattr(queue.pending_messages_per_session, "pop")
    rest = event(demo, None)
    assert rest.session_hash == rest._id  # so a REST call's session is found among the analytics' event ids
    assert demo.upload_file_set in demo.temp_file_sets and all(isinstance(s, set) for s in demo.temp_file_sets)
    assert hasattr(demo.app, "state") and gr.State(delete_callback=print).delete_callback is print
    holder.session_data.pop("reaped")
    holder.time_last_used.pop("reaped")


def test_an_upload_buttons_own_preparation_leaves_an_empty_file_which_no_stray_file_does_not(tmp_path, monkeypatch):
    """sessions.INTERNALS: UploadButton._process_single_file (type="filepath") makes an empty temporary file in
    Gradio's cache each time an event takes an upload, and never removes it (issue 44: 48 zero-byte tmp* files);
    uploads.no_stray_file replaces it on the Run tab's button with the same path and file-type check."""
    from gradio.data_classes import FileData

    from playground.ui import uploads

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))
    trace = tmp_path / "run.json"
    trace.write_text("{}")
    gradios, ours = (gr.UploadButton(type="filepath", file_types=[".json"]) for _ in range(2))
    uploads.no_stray_file(ours)
    assert gradios.preprocess(FileData(path=str(trace))) == str(trace)
    left = [p for p in tmp_path.iterdir() if p != trace]
    assert len(left) == 1 and uploads.LEFTOVER.fullmatch(left[0].name) and left[0].stat().st_size == 0
    left[0].unlink()
    assert ours.preprocess(FileData(path=str(trace))) == str(trace)
    assert list(tmp_path.iterdir()) == [trace]
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG")
    with pytest.raises(gr.Error, match="Invalid file type"):
        ours.preprocess(FileData(path=str(photo)))  # refused as Gradio's own refuses it


def test_a_job_that_hands_the_device_back_is_counted_off_the_device_line_when_it_ends():
    """Listener.leave_device moves a running job's count from the device's line to OFF_DEVICE's, relying on Gradio
    to read the event's concurrency_id again when the job ends. Were Gradio to free the device's line instead, its
    count would go below 0 and two decoding jobs could run at once: a launched page, its real queue."""
    import time

    from gradio_client import Client

    seen = {}

    def leave(x: str, request: gr.Request) -> str:
        listener = jobs.Listener(request)
        listener.leave_device()
        lines = request.request.app.get_blocks()._queue.event_queue_per_concurrency_id
        seen["during"] = (lines[DECODING].current_concurrency, lines[jobs.OFF_DEVICE].current_concurrency)
        time.sleep(0.3)
        return x

    with gr.Blocks() as page:
        box = gr.Textbox()
        gr.Button().click(leave, box, box, api_name="generate", concurrency_id=DECODING)
    page.queue(default_concurrency_limit=1).launch(prevent_thread_lock=True, server_name="127.0.0.1")
    try:
        assert Client(page.local_url, verbose=False).predict("hi", api_name="/generate") == "hi"
        lines = page._queue.event_queue_per_concurrency_id
        end = time.monotonic() + 5
        while lines[jobs.OFF_DEVICE].current_concurrency and time.monotonic() < end:
            time.sleep(0.05)
        assert seen["during"] == (0, 1)
        assert (lines[DECODING].current_concurrency, lines[jobs.OFF_DEVICE].current_concurrency) == (0, 0)
    finally:
        page.close()
