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
  (ui/layout.py), and clean_files the empty folders they leave and the records of removed files.
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
import json
import os
import re
import secrets
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import gradio as gr
from gradio.utils import get_upload_folder
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from playground import settings
from playground.ui import jobs
from playground.ui.state import SessionState

INTERNALS = (
    "Blocks.state_holder (StateHolder.session_data / time_last_used / lock)",
    "SessionState.state_data / blocks_config.blocks",
    "Queue.event_analytics (keyed by event id)",
    "Queue.pending_event_ids_session",
    "Queue.pending_messages_per_session",
    "Blocks.temp_file_sets / upload_file_set",
    "App.state",
)
REAP_EVERY_S = 5.0
REST_IDLE_S = 30.0
MAX_SESSIONS = 300
MAX_UPLOADS = 8
UPLOAD_BYTES = 1_000_000 + 64 * 1024  # the app's max_file_size (1 MB, layout.MAX_FILE_SIZE) and the form's overhead
UPLOAD_TTL_S = 600.0
EMPTY_FOLDER_S = 60.0  # an empty folder in the cache this old is left over (Gradio writes a new one's file at once)
CLIENT_COOKIE = "playground_client"  # a page's random id: binds an upload to the page that made it
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")


def downloads_root() -> Path:
    """Where sessions keep their download files: Gradio's cache (GRADIO_TEMP_DIR), which it serves as is."""
    return Path(get_upload_folder())


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
    """Remove uploads older than UPLOAD_TTL_S, forget the records of files that are gone, and remove the empty
    folders older than EMPTY_FOLDER_S that file removals leave in Gradio's cache."""
    now = time.time() if now is None else now
    for path in list(blocks.upload_file_set):
        try:
            if now - os.lstat(path).st_ctime > UPLOAD_TTL_S:
                _remove(Path(path))
        except FileNotFoundError:
            pass
    for files in blocks.temp_file_sets:
        files.difference_update([f for f in list(files) if not os.path.lexists(f)])
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


def _remove(path: Path) -> None:
    """A file in Gradio's cache, and its folder once empty."""
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass


# ---------------------------------------------------------------- uploads


class Uploads:
    """The uploads each address holds (paths in Gradio's cache), and who uploaded each (owner()), forgotten once
    removed. One per app (uploads())."""

    def __init__(self) -> None:
        self._held: dict[str, list[str]] = {}
        self._owners: dict[str, set[str]] = {}  # path -> owners (Gradio names an upload's folder by its content)
        self._lock = threading.Lock()

    def held(self, address: str) -> list[str]:
        """The address's uploads still on disk."""
        with self._lock:
            paths = [p for p in self._held.get(address, []) if os.path.lexists(p)]
            if paths:
                self._held[address] = paths
            else:
                self._held.pop(address, None)
            for path in [p for p in self._owners if not os.path.lexists(p)]:
                del self._owners[path]
            return list(paths)

    def add(self, address: str, paths: list[str], owner: str = "") -> list[str]:
        """Record an upload's files for `owner`; those beyond MAX_UPLOADS (several files in one request) are removed
        at once. Returns the paths removed."""
        with self._lock:
            held = self._held.setdefault(address, [])
            room = max(0, MAX_UPLOADS - len(held))
            held.extend(paths[:room])
            for path in paths[:room]:
                self._owners.setdefault(os.path.realpath(path), set()).add(owner)
        for path in paths[room:]:
            _remove(Path(path))
        return paths[room:]

    def take(self, path: str, owner: str) -> bool:
        """Whether `owner` uploaded `path`; its claim is then used up (shared() says whether another's remains)."""
        key = os.path.realpath(path)
        with self._lock:
            owners = self._owners.get(key, set())
            if owner not in owners:
                return False
            owners.discard(owner)
            if not owners:
                self._owners.pop(key, None)
            return True

    def shared(self, path: str) -> bool:
        """Whether another owner still holds the same file (the same bytes uploaded twice share one path)."""
        with self._lock:
            return bool(self._owners.get(os.path.realpath(path)))

    def prune(self) -> None:
        """Forget the addresses whose uploads are all gone (used or expired)."""
        with self._lock:
            addresses = list(self._held)
        for address in addresses:
            self.held(address)


def uploads(app: Any) -> Uploads:
    """The app's record of uploads (on its Starlette state, so that two apps in one process never share one)."""
    if not hasattr(app.state, "playground_uploads"):
        app.state.playground_uploads = Uploads()
    return app.state.playground_uploads


def owner(http_request: Any) -> str:
    """Who a request comes from, for uploads: its network address and the page's CLIENT_COOKIE (the browser sends
    it with the upload and with the event that takes it; a client without cookies is its address alone)."""
    cookies = getattr(http_request, "cookies", None) or {}
    token = cookies.get(CLIENT_COOKIE, "")
    return f"{jobs.client_address(http_request)} {token if _TOKEN.fullmatch(token) else ''}"


def take_upload(path: str | Path, request: Any) -> bytes:
    """An upload's bytes, the file then removed (used): the way a tab that takes an upload reads it (a gr.File's
    value is the path of the upload in Gradio's cache). Only the file this client uploaded, from this request's
    address and page (owner()): another session's upload or download, any other file of the cache, or a path
    outside it is refused (PermissionError) and left as it was. `request`: the event's gr.Request."""
    path = Path(path)
    http_request = getattr(request, "request", None)
    app = getattr(http_request, "app", None)
    if (
        app is None
        or not path.resolve().is_relative_to(downloads_root().resolve())
        or not uploads(app).take(str(path), owner(http_request))
    ):
        raise PermissionError("Only a file uploaded from this page can be opened: upload it again.")
    try:
        return path.read_bytes()
    finally:
        if not uploads(app).shared(str(path)):
            _remove(path)


class UploadLimit:
    """ASGI middleware on POST .../upload: a request over UPLOAD_BYTES (or of no declared length) is refused (413,
    411), and so is an address that already holds MAX_UPLOADS uploads (429); each answer says what to do."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith("/upload"):
            return await self.app(scope, receive, send)
        request = Request(scope)
        record = uploads(scope["app"])
        address = jobs.client_address(request)
        length = request.headers.get("content-length", "")
        refusal = None
        if not length.isdigit():
            refusal = (411, "An upload must say its length (Content-Length).")
        elif int(length) > UPLOAD_BYTES:
            refusal = (413, f"An upload may be at most {UPLOAD_BYTES // 1000:,} KB; this one is {int(length):,} bytes.")
        elif len(record.held(address)) >= MAX_UPLOADS:
            refusal = (
                429,
                f"Your network address already holds {MAX_UPLOADS} uploads, the most it may: use them, or "
                f"wait until they expire ({UPLOAD_TTL_S / 60:.0f} minutes after each upload).",
            )
        if refusal is not None:
            return await PlainTextResponse(refusal[1], status_code=refusal[0])(scope, receive, send)
        status, body = [0], []

        async def watching(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body" and status[0] == 200:
                body.append(message.get("body", b""))
                if not message.get("more_body"):
                    try:
                        paths = json.loads(b"".join(body))
                    except ValueError:
                        paths = []
                    record.add(
                        address,
                        [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else [],
                        owner(request),
                    )
            await send(message)

        await self.app(scope, receive, watching)


class ClientCookie:
    """ASGI middleware: a response to a request without a CLIENT_COOKIE sets one (random, HttpOnly), so that the
    page's upload and the event that takes it can be told from another page's at the same address (owner())."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or _TOKEN.fullmatch(Request(scope).cookies.get(CLIENT_COOKIE, "")):
            return await self.app(scope, receive, send)
        cookie = f"{CLIENT_COOKIE}={secrets.token_urlsafe(24)}; Path=/; HttpOnly; SameSite=Lax".encode()

        async def with_cookie(message: dict) -> None:
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", [])) + [(b"set-cookie", cookie)])
            await send(message)

        await self.app(scope, receive, with_cookie)


# ---------------------------------------------------------------- running it


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[None]:
    """The app's lifespan (launch(app_kwargs=...)): reap sessions and clean files every REAP_EVERY_S seconds."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            try:
                blocks = app.get_blocks()
                reap(blocks)  # on the event loop, as Gradio changes what both read: no thread races them
                clean_files(blocks)
                uploads(app).prune()
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
