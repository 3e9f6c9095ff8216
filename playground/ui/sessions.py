"""Bounded state: what a session, a REST call or an upload leaves on the server has an end.

- Sessions (a browser page, a gradio_client Client, a REST call) expire once idle, with their state and files (the
  gr.State's delete_callback: SessionState.close) and the messages Gradio holds for them. Gradio keeps every session
  it ever saw (up to 10,000, each with its own copy of the page's config, about 200 KB here) and a closed page's
  state for an hour; a REST call is a session that never closes. A session with a job waiting or running never
  expires. Idle limits: PLAYGROUND_SESSION_IDLE_S (900 s); a REST call's own session (Gradio names it after the
  call's event) REST_IDLE_S once its result has been read, else PLAYGROUND_SESSION_IDLE_S too; and beyond
  MAX_SESSIONS the least recently used idle ones go first.
- The download files live in a folder of the session inside Gradio's cache, where Gradio serves them without
  copying (a copy per run was never removed); Blocks' delete_cache removes cached files older than the idle limit
  (ui/layout.py), clean_files the records of removed files and sweep_cache the empty folders they leave.
- Uploads (POST /gradio_api/upload) are bounded per network address in count (MAX_UPLOADS held at once) and size
  (one request at most UPLOAD_BYTES, so an address holds at most MAX_UPLOADS x 1 MB), and removed when used
  (take_upload: the way a tab reads one) or UPLOAD_TTL_S after they came. Each is bound to who uploaded it: the
  address and the page's cookie (CLIENT_COOKIE, set by ClientCookie); take_upload gives an upload to that page
  alone, never another session's upload or download, nor any other file of Gradio's cache.

launch_kwargs() (ui/layout.py's launch_options) runs the reaper and the upload limit; like jobs.py, this module
reads Gradio's internals (INTERNALS), each with its test in tests/ui/test_gradio_internals.py.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import gradio as gr

from playground.env import settings
from playground.ui import budget
from playground.ui.state import SessionState
from playground.ui.upload_limit import UploadLimit
from playground.ui.uploads import (  # noqa: F401  the upload rules, by their names here too
    CLIENT_COOKIE,
    MAX_UPLOADS,
    UPLOAD_BYTES,
    UPLOAD_TTL_S,
    ClientCookie,
    Uploads,
    _remove,
    downloads_root,
    owner,
    remove_leftovers,
    take_upload,
    uploads,
)

INTERNALS = (
    "Blocks.state_holder (StateHolder.session_data / time_last_used / lock)",
    "SessionState.state_data / blocks_config.blocks",
    "Queue.event_analytics (keyed by event id)",
    "Queue.pending_event_ids_session",
    "Queue.pending_messages_per_session",
    "Blocks.temp_file_sets / upload_file_set",
    "App.state",
    "UploadButton._process_single_file (uploads.no_stray_file)",
)
REAP_EVERY_S = 5.0
REST_IDLE_S = 30.0
MAX_SESSIONS = 300
SWEEP_EVERY_S = 60.0  # how often sweep_cache scans Gradio's cache (it grows with the app's age): EMPTY_FOLDER_S apart
EMPTY_FOLDER_S = 60.0  # an empty folder in the cache this old is left over (Gradio writes a new one's file at once)


def new_session() -> SessionState:
    """A session's state (gr.State's value), its downloads inside Gradio's cache."""
    return SessionState(downloads_root())


# ---------------------------------------------------------------- sessions


def _busy(queue: Any) -> set[str]:
    """Sessions with an event waiting or running (any event: theory and export run through the queue too)."""
    waiting = [e for line in list(queue.event_queue_per_concurrency_id.values()) for e in list(line.queue)]
    running = [e for job in list(queue.active_jobs) if job for e in job]
    return {e.session_hash for e in waiting + running}


def _close(session: Any) -> None:
    """Call the delete_callback of every gr.State value of a Gradio session (ours: SessionState.close)."""
    for key, value in list(session.state_data.items()):
        block = session.blocks_config.blocks.get(key)
        if isinstance(block, gr.State):
            try:
                block.delete_callback(value)
            except Exception:  # noqa: BLE001  one session's cleanup must not stop the others'
                pass
    session.state_data.clear()


def reap(blocks: gr.Blocks, now: float | None = None) -> list[str]:
    """Expire the idle sessions (see the module's docstring); returns their ids. `now`: time.time() unless given."""
    holder, queue = blocks.state_holder, blocks._queue
    now = time.time() if now is None else now
    busy = _busy(queue)
    idle_limit = settings.read().session_idle_s

    def idle(sid: str) -> float:
        used = holder.time_last_used.get(sid)
        return now - used.timestamp() if used is not None else 0.0

    def limit(sid: str) -> float:
        rest = sid in queue.event_analytics  # Gradio named this session after a REST call's event
        return REST_IDLE_S if rest and not queue.pending_event_ids_session.get(sid) else idle_limit

    sessions = [sid for sid in list(holder.session_data) if sid not in busy]  # least recently used first
    expired = [sid for sid in sessions if idle(sid) > limit(sid)]
    gone = set(expired)
    left = [sid for sid in sessions if sid not in gone]
    expired += left[: max(0, len(holder.session_data) - len(expired) - MAX_SESSIONS)]
    for sid in expired:
        with holder.lock:
            session = holder.session_data.pop(sid, None)
            holder.time_last_used.pop(sid, None)
        if session is not None:
            _close(session)
        queue.pending_event_ids_session.pop(sid, None)  # a result still unread is past the idle limit too
        queue.pending_messages_per_session.pop(sid, None)
    return expired


# ---------------------------------------------------------------- files


def clean_files(blocks: gr.Blocks, now: float | None = None) -> None:
    """Remove uploads older than UPLOAD_TTL_S and forget the records of files that are gone (the folders they leave:
    sweep_cache, which the reaper runs in a thread of its own: a long scan must not hold up the event loop)."""
    now = time.time() if now is None else now
    for path in list(blocks.upload_file_set):
        try:
            if now - os.lstat(path).st_ctime > UPLOAD_TTL_S:
                _remove(Path(path))
        except FileNotFoundError:
            pass
    for files in blocks.temp_file_sets:
        files.difference_update([f for f in list(files) if not os.path.lexists(f)])


def sweep_cache(now: float | None = None) -> None:
    """Remove the empty folders older than EMPTY_FOLDER_S that file removals leave in Gradio's cache, and Gradio's
    temporary files left there (uploads.remove_leftovers). The filesystem only: safe off the event loop. Gradio's
    cache keeps a folder for every file it ever served, so the scan grows with the app's age."""
    now = time.time() if now is None else now
    cache = downloads_root()
    for folder in list(cache.iterdir()) if cache.is_dir() else []:
        try:
            if (
                folder.is_dir()
                and not folder.is_symlink()
                and not any(folder.iterdir())
                and now - folder.stat().st_mtime > EMPTY_FOLDER_S
            ):
                folder.rmdir()
        except OSError:  # written to meanwhile, or removed by someone else
            pass
    remove_leftovers(now=now)


# ---------------------------------------------------------------- running it


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """The app's lifespan (launch(app_kwargs=...)): reap sessions and clean files every REAP_EVERY_S seconds."""

    async def loop() -> None:
        swept = time.monotonic()
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            try:
                blocks = app.get_blocks()
                reap(blocks)  # on the event loop, as Gradio changes what both read: no thread races them
                clean_files(blocks)
                if time.monotonic() - swept >= SWEEP_EVERY_S:  # the cache's scan, in a thread: streaming runs on
                    swept = time.monotonic()
                    await asyncio.to_thread(sweep_cache)
                uploads(app).prune()
                budget.LEDGER.charge(uploads(app))  # used and expired uploads are counted no more
            except Exception:  # noqa: BLE001  the next round tries again; serving goes on
                pass

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()


def launch_kwargs() -> dict:
    """What launch() takes for this: the reaper in the app's lifespan, the upload limit and the page's cookie as
    middleware (the cookie's outside: an upload's request already holds it)."""
    from starlette.middleware import Middleware

    return {"app_kwargs": {"lifespan": lifespan, "middleware": [Middleware(ClientCookie), Middleware(UploadLimit)]}}
