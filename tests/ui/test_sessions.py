"""Bounded state (playground.ui.sessions, issue 29.4): idle sessions expire with their state and files, Gradio's cache
is cleaned, and uploads are bounded per address and removed once used or expired. On a real Blocks and its queue
(not launched) and, for uploads, the real Gradio app behind a test client; the levels over 1,000 REST calls are
measured by scripts/rest_load.py (docs/reliability.md)."""
from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import gradio as gr
import pytest
from gradio import queueing
from starlette.testclient import TestClient

from playground.ui import build_demo, launch_options, sessions
from playground.ui.state import SessionState

IDLE = 900  # PLAYGROUND_SESSION_IDLE_S unset


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """Gradio's cache (GRADIO_TEMP_DIR) in a test folder."""
    folder = tmp_path / "gradio-cache"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    monkeypatch.delenv("PLAYGROUND_SESSION_IDLE_S", raising=False)
    return folder


@pytest.fixture
def page(cache) -> tuple[gr.Blocks, gr.State]:
    """A page with the app's session state and one queued event."""
    with gr.Blocks() as demo:
        state = gr.State(sessions.new_session, delete_callback=SessionState.close)
        box = gr.Textbox()
        gr.Button().click(lambda s, x: x, [state, box], box, api_name="generate")
    return demo.queue(), state


def open_session(demo: gr.Blocks, state: gr.State, sid: str, idle_s: float, now: float) -> SessionState:
    """A session Gradio holds, last used idle_s before now, whose state wrote a download."""
    session = demo.state_holder[sid]
    value = session[state._id]
    value.downloads.write({"trace.csv": "round,k\n"})
    demo.state_holder.time_last_used[sid] = datetime.datetime.fromtimestamp(now - idle_s)
    return value


def folders(value: SessionState) -> Path:
    return value.downloads._folder


def test_idle_sessions_expire_with_their_state_and_files(page, cache):
    """Issue 29.4: every REST call is a session that never closes; Gradio kept them all (each with its copy of the
    page's config) and their files. Now a session idle past PLAYGROUND_SESSION_IDLE_S goes, with its files and the
    messages Gradio holds for it; a session with a job waiting or running never does."""
    demo, state = page
    now = time.time()
    fresh = open_session(demo, state, "fresh", 60, now)
    idle = open_session(demo, state, "idle", IDLE + 1, now)
    waiting = open_session(demo, state, "waiting", IDLE + 1, now)
    fn = next(f for f in demo.fns.values() if f.api_name == "generate")
    demo._queue.create_event_queue_for_fn(fn)
    demo._queue.event_queue_per_concurrency_id[fn.concurrency_id].queue.append(queueing.Event("waiting", fn, None, None))
    demo._queue.pending_messages_per_session["idle"] = object()
    idle_folder = folders(idle)
    assert idle_folder.is_relative_to(cache) and idle_folder.is_dir()  # downloads live in Gradio's cache
    assert sessions.reap(demo, now) == ["idle"]
    assert "idle" not in demo.state_holder.session_data and "idle" not in demo.state_holder.time_last_used
    assert not idle_folder.exists()
    assert "idle" not in demo._queue.pending_messages_per_session
    assert set(demo.state_holder.session_data) == {"fresh", "waiting"}
    assert folders(fresh).is_dir() and folders(waiting).is_dir()
    assert len(list(cache.glob("playground-session-*"))) == 2  # the expired session's folder is gone


def test_a_rest_calls_session_goes_once_its_result_is_read(page):
    """A REST call brings no session: Gradio names one after the call's event. It goes REST_IDLE_S after its result
    was read; a result nobody has read yet is kept for the full idle limit."""
    demo, state = page
    now = time.time()
    for sid in ("rest-read", "rest-unread", "client"):
        open_session(demo, state, sid, sessions.REST_IDLE_S + 1, now)
    demo._queue.event_analytics.update({"rest-read": {}, "rest-unread": {}})  # keyed by event id
    demo._queue.pending_event_ids_session.update({"rest-read": set(), "rest-unread": {"rest-unread"}})
    assert sessions.reap(demo, now) == ["rest-read"]
    assert "rest-read" not in demo._queue.pending_event_ids_session
    demo.state_holder.time_last_used["rest-unread"] = datetime.datetime.fromtimestamp(now - IDLE - 1)
    assert sessions.reap(demo, now) == ["rest-unread"]  # unread past the idle limit: dropped with its messages
    assert "rest-unread" not in demo._queue.pending_event_ids_session


def test_the_idle_limit_is_the_setting_and_sessions_are_capped(page, monkeypatch):
    demo, state = page
    now = time.time()
    monkeypatch.setenv("PLAYGROUND_SESSION_IDLE_S", "60")
    open_session(demo, state, "a", 61, now)
    assert sessions.reap(demo, now) == ["a"]
    monkeypatch.setattr(sessions, "MAX_SESSIONS", 3)
    for i in range(5):
        open_session(demo, state, f"s{i}", 5 - i, now)  # s0 used longest ago
    assert sessions.reap(demo, now) == ["s0", "s1"]  # the least recently used idle ones beyond the cap


def test_the_cache_is_cleaned_of_old_uploads_empty_folders_and_records_of_removed_files(page, cache):
    """Issue 29.4: 926 cache folders by the end of the probes, and 50 uploads all kept. Gradio's delete_cache removes
    old files but leaves their folders; clean_files removes those, and uploads after UPLOAD_TTL_S."""
    demo, _ = page
    now = time.time()
    upload = cache / "hash1" / "run.json"
    upload.parent.mkdir(parents=True)
    upload.write_text("{}")
    empty, recent = cache / "hash2", cache / "hash3"
    empty.mkdir()
    recent.mkdir()
    os.utime(empty, (now - sessions.EMPTY_FOLDER_S - 1,) * 2)
    demo.upload_file_set.add(str(upload))
    demo.temp_file_sets.append({str(cache / "hash4" / "gone.csv")})
    sessions.clean_files(demo, now)
    assert upload.exists() and not empty.exists() and recent.exists()  # a fresh empty folder may be about to be filled
    assert not any(str(cache / "hash4") in f for files in demo.temp_file_sets for f in files)
    sessions.clean_files(demo, now + sessions.UPLOAD_TTL_S + 1)
    assert not upload.exists() and not upload.parent.exists()


def test_uploads_are_bounded_per_address_and_removed_once_used(page, cache):
    """Issue 29.4: 50 uploads of 0.9 MB were all kept (cache 7.6 -> 50.5 MiB). Now an address holds at most
    MAX_UPLOADS at once, a request over UPLOAD_BYTES is refused before it is read, and take_upload removes the file."""
    demo, _ = page
    demo.max_file_size = 1_000_000  # what launch(max_file_size="1mb") sets
    app = gr.routes.App.create_app(demo, app_kwargs=dict(sessions.launch_kwargs()["app_kwargs"], lifespan=None))
    client = TestClient(app)
    paths = []
    for i in range(sessions.MAX_UPLOADS):
        answer = client.post("/gradio_api/upload", files={"files": (f"run{i}.json", b"{}" * 1000)})
        assert answer.status_code == 200, answer.text
        paths += answer.json()
    assert all(Path(p).is_relative_to(cache) and Path(p).exists() for p in paths)
    refused = client.post("/gradio_api/upload", files={"files": ("one-more.json", b"{}")})
    assert refused.status_code == 429 and "already holds 8 uploads" in refused.text
    big = client.post("/gradio_api/upload", files={"files": ("big.json", b"x" * (sessions.UPLOAD_BYTES + 1))})
    assert big.status_code == 413 and "at most 1,065 KB" in big.text
    assert sessions.take_upload(paths[0]) == b"{}" * 1000 and not Path(paths[0]).exists()
    assert client.post("/gradio_api/upload", files={"files": ("next.json", b"{}")}).status_code == 200  # room again
    with pytest.raises(PermissionError):
        sessions.take_upload(__file__)  # only a file in Gradio's cache
    assert Path(__file__).exists()


def test_the_app_cleans_gradios_cache_and_runs_the_reaper(tiny_catalog, runner, cache):
    demo = build_demo(runner)
    assert demo.delete_cache == (300, IDLE + 300)  # Gradio removes cached files older than the idle limit
    app_kwargs = launch_options()["app_kwargs"]
    assert app_kwargs["lifespan"] is sessions.lifespan
    assert [m.cls for m in app_kwargs["middleware"]] == [sessions.UploadLimit]
    state = next(b for b in demo.blocks.values() if isinstance(b, gr.State))
    assert state.value is sessions.new_session and state.delete_callback == SessionState.close
    assert sessions.new_session().downloads._root == cache
