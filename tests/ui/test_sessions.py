"""Bounded state (playground.ui.sessions, issue 29.4): idle sessions expire with their state and files, Gradio's cache
is cleaned, and uploads are bounded per address and removed once used or expired. On a real Blocks and its queue
(not launched) and, for uploads, the real Gradio app behind a test client; the levels over 1,000 REST calls are
measured by scripts/rest_load.py (docs/reliability.md)."""

from __future__ import annotations

import datetime
import json
import os
import time
from pathlib import Path

import gradio as gr
import pytest
from gradio import queueing
from starlette.requests import Request
from starlette.testclient import TestClient

from playground.core.config import DrafterKind
from playground.decoding.suffix import SuffixMemory
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
    demo._queue.event_queue_per_concurrency_id[fn.concurrency_id].queue.append(
        queueing.Event("waiting", fn, None, None)
    )
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
    old files but leaves their folders; sweep_cache removes those, and clean_files uploads after UPLOAD_TTL_S."""
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
    sessions.sweep_cache(now)
    assert upload.exists() and not empty.exists() and recent.exists()  # a fresh empty folder may be about to be filled
    assert not any(str(cache / "hash4") in f for files in demo.temp_file_sets for f in files)
    sessions.clean_files(demo, now + sessions.UPLOAD_TTL_S + 1)
    sessions.sweep_cache(now + sessions.UPLOAD_TTL_S + 1)
    assert not upload.exists() and not upload.parent.exists()


def test_uploads_are_bounded_per_address_and_removed_once_used(page, cache):
    """Issue 29.4: 50 uploads of 0.9 MB were all kept (cache 7.6 -> 50.5 MiB). Now an address holds at most
    MAX_UPLOADS at once, a request over UPLOAD_BYTES is refused before it is read, and take_upload removes the file."""
    demo, _ = page
    demo.max_file_size = sessions.UPLOAD_BYTES  # what launch(**launch_options()) sets
    app = gr.routes.App.create_app(demo, app_kwargs=dict(sessions.launch_kwargs()["app_kwargs"], lifespan=None))
    client = TestClient(app)
    client.get("/gradio_api/info")  # the page's first request: it gets its cookie
    paths = []
    for i in range(sessions.MAX_UPLOADS):
        answer = client.post("/gradio_api/upload", files={"files": (f"run{i}.json", b"{}" * 1000)})
        assert answer.status_code == 200, answer.text
        paths += answer.json()
    assert all(Path(p).is_relative_to(cache) and Path(p).exists() for p in paths)
    refused = client.post("/gradio_api/upload", files={"files": ("one-more.json", b"{}")})
    assert refused.status_code == 429 and "already holds 8 uploads" in refused.text
    big = client.post("/gradio_api/upload", files={"files": ("big.json", b"x" * (sessions.UPLOAD_BYTES + 1))})
    assert big.status_code == 413 and "a trace file may be at most 1,000,000 bytes" in big.text
    mine = gr.Request(request=http_request(app, client.cookies[sessions.CLIENT_COOKIE]))
    assert sessions.take_upload(paths[0], mine) == b"{}" * 1000 and not Path(paths[0]).exists()
    assert client.post("/gradio_api/upload", files={"files": ("next.json", b"{}")}).status_code == 200  # room again
    with pytest.raises(PermissionError):
        sessions.take_upload(__file__, mine)  # only a file in Gradio's cache
    assert Path(__file__).exists()


def http_request(app, cookie: str = "") -> Request:
    """The HTTP request behind an event from the test client's address, with a page's cookie (or none)."""
    headers = [(b"cookie", f"{sessions.CLIENT_COOKIE}={cookie}".encode())] if cookie else []
    return Request(
        {
            "type": "http",
            "app": app,
            "method": "POST",
            "path": "/",
            "headers": headers,
            "client": ("testclient", 50000),
            "query_string": b"",
        }
    )


def open_upload(client: TestClient, demo: gr.Blocks, path: str, cookie: str | None) -> str:
    """The Run tab's status after its 'Open a trace JSON' event took `path`, sent through Gradio's queue from the page
    whose cookie is `cookie` (None: a client without cookies)."""
    as_page(client, cookie)
    event = next(f for f in demo.fns.values() if f.fn.__name__ == "on_upload")
    session = f"s{time.monotonic_ns()}"
    joined = client.post(
        "/gradio_api/queue/join",
        json={
            "data": [{"path": path, "meta": {"_type": "gradio.FileData"}}, None],
            "fn_index": event._id,
            "session_hash": session,
        },
    )
    assert joined.status_code == 200, joined.text
    with client.stream("GET", f"/gradio_api/queue/data?session_hash={session}") as stream:
        for line in stream.iter_lines():
            message = json.loads(line[5:]) if line.startswith("data:") else {}
            if message.get("msg") == "process_completed":
                return message["output"]["data"][0]
    raise AssertionError("the event never completed")


COOKIE = "playground_client"  # sessions.CLIENT_COOKIE, the page's cookie


def as_page(client: TestClient, cookie: str | None) -> None:
    """The client's next requests come from the page whose cookie is `cookie` (None: no cookie)."""
    client.cookies.clear()
    if cookie is not None:
        client.cookies.set(COOKIE, cookie)


ALICE, BOB = "alice-page-cookie-0001", "bob-page-cookie-00002"


def test_an_upload_is_taken_only_by_the_page_that_uploaded_it(tiny_catalog, runner, cache):
    """Issue 35.5: the Run tab's upload event took any file of Gradio's cache and removed it, so one client could open
    (and delete) another session's download or upload by its path. Now only the page that uploaded a file takes it:
    another page at the same address (another cookie), a download of another session and any other cached file are
    refused and left as they were; a client without cookies takes its own upload by its address."""
    demo = build_demo(runner)
    demo.max_file_size = sessions.UPLOAD_BYTES
    app = gr.routes.App.create_app(demo, app_kwargs=dict(launch_options()["app_kwargs"], lifespan=None))
    trace = (Path(__file__).resolve().parents[2] / "assets" / "runs" / "story.json").read_bytes()
    with TestClient(app) as client:
        client.get("/gradio_api/startup-events")  # starts Gradio's queue
        as_page(client, ALICE)
        alices = client.post("/gradio_api/upload", files={"files": ("run.json", trace)}).json()[0]
        download = SessionState(cache).downloads.write({"trace.json": trace.decode()})[0]  # another session's
        for path, cookie in ((alices, BOB), (str(download), ALICE), (alices, None)):
            status = open_upload(client, demo, path, cookie)
            assert "Only a file uploaded from this page can be opened" in status and "status-error" in status, status
            assert Path(path).exists()  # left as it was
        assert "Recorded run (the file" in open_upload(client, demo, alices, ALICE) and not Path(alices).exists()
        as_page(client, None)
        rest = client.post("/gradio_api/upload", files={"files": ("mine.json", trace + b" ")}).json()[0]  # no cookie
        assert "Recorded run (the file" in open_upload(client, demo, rest, None) and not Path(rest).exists()


@pytest.mark.parametrize(
    "forged", ["/etc/passwd", "../../../etc/passwd", "http://example.com/run.json", "a\x00b", "x" * 5000]
)
def test_a_forged_upload_path_gets_the_tabs_own_message(tiny_catalog, runner, cache, forged):
    """Issue 44: /etc/passwd, ../ or a URL as the upload event's path read nothing, but the answer was a bare
    {"error": null} (Gradio's own check, in a launched app, refused it before the tab saw it). Now the tab's own
    message says what to do, and nothing else changes."""
    demo = build_demo(runner)
    demo.has_launched = True  # Gradio checks an upload event's paths only in a launched app
    app = gr.routes.App.create_app(demo, app_kwargs=dict(launch_options()["app_kwargs"], lifespan=None))
    with TestClient(app) as client:
        client.get("/gradio_api/startup-events")
        status = open_upload(client, demo, forged, ALICE)
    assert status is not None and "Only a file uploaded from this page can be opened" in status, status
    assert "status-error" in status and "/etc" not in status and "example.com" not in status


def test_the_app_cleans_gradios_cache_and_runs_the_reaper(tiny_catalog, runner, cache):
    demo = build_demo(runner)
    assert demo.delete_cache == (300, IDLE + 300)  # Gradio removes cached files older than the idle limit
    app_kwargs = launch_options()["app_kwargs"]
    assert app_kwargs["lifespan"] is sessions.lifespan
    assert [m.cls for m in app_kwargs["middleware"]] == [sessions.ClientCookie, sessions.UploadLimit]
    state = next(b for b in demo.blocks.values() if isinstance(b, gr.State))
    assert state.value is sessions.new_session and state.delete_callback == SessionState.close
    assert sessions.new_session().downloads._root == cache


def test_a_drafter_kind_keeps_its_state_per_session_and_a_kind_without_one_keeps_nothing():
    """SessionState.kept: the state a strategy's session factory makes (suffix decoding's memory of earlier runs),
    one per session and kind, gone when the session closes; None for a kind with no factory."""
    one, two = SessionState(), SessionState()
    memory = one.kept(DrafterKind.SUFFIX)
    assert isinstance(memory, SuffixMemory) and one.kept(DrafterKind.SUFFIX) is memory
    assert two.kept(DrafterKind.SUFFIX) is not memory
    assert one.kept(DrafterKind.DRAFT_MODEL) is None and one.kept(DrafterKind.LOOKAHEAD) is None
    one.close()
    assert one.kept(DrafterKind.SUFFIX) is not memory


def test_the_reapers_scan_of_gradios_cache_leaves_the_event_loop_free(page, cache, monkeypatch):
    """Gradio's cache keeps a folder for every file it served; on a long-lived cache the scan held the event loop
    every REAP_EVERY_S and streamed rounds waited (docs/first-minutes.md, round seven). The reaper runs the scan in
    a thread: a coroutine beside it keeps ticking while a slow scan runs."""
    import asyncio

    demo, _ = page
    scanning = []
    monkeypatch.setattr(sessions, "REAP_EVERY_S", 0.01)
    monkeypatch.setattr(sessions, "SWEEP_EVERY_S", 0.0)
    monkeypatch.setattr(sessions, "sweep_cache", lambda: (scanning.append(1), time.sleep(0.4)))

    class App:
        def get_blocks(self) -> gr.Blocks:
            return demo

    async def main() -> list[float]:
        ticks = []
        async with sessions.lifespan(App()):
            start = time.monotonic()
            while time.monotonic() - start < 0.6:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)
        return ticks

    ticks = asyncio.run(main())
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert scanning and max(gaps) < 0.2, (len(scanning), max(gaps))
