"""Uploads (POST /gradio_api/upload): bounded per network address in count (MAX_UPLOADS held at once) and size (one
request at most UPLOAD_BYTES; ui/upload_limit.py enforces both), removed when used (take_upload: the way a tab reads one) or UPLOAD_TTL_S after they
came (sessions.clean_files), and counted in the sessions' memory budget (ui/budget.py), which may remove one (its
page is told when it sends it). Each is bound to who uploaded it: the address and the page's cookie (CLIENT_COOKIE,
set by ClientCookie); take_upload gives an upload to that page alone, never another session's upload or download,
nor any other file of Gradio's cache."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import stat
import threading
import time
from pathlib import Path
from typing import Any

from gradio import Error as GradioError
from gradio import processing_utils, route_utils
from gradio.context import LocalContext
from gradio.exceptions import InvalidPathError
from gradio.utils import NamedString, get_upload_folder
from gradio_client import utils as client_utils
from starlette.requests import Request

from playground.env import settings
from playground.run import recorded
from playground.ui import budget, jobs

MAX_SESSIONS = 300  # sessions.MAX_SESSIONS: bounds the record of removed uploads
MAX_UPLOADS = 8
TRACE_BYTES = recorded.MAX_BYTES  # the most a file may be (1,000,000 bytes), as the page, this route and the tab say
FORM_BYTES = 16 * 1024  # what an upload's form adds around its file: the boundary, the part's headers, the file name
UPLOAD_BYTES = TRACE_BYTES + FORM_BYTES  # the most one upload request may say (Content-Length) and send
MAX_FILE_SIZE = (
    UPLOAD_BYTES  # Gradio's (launch(max_file_size=)): a file is less than its request, so never what refuses
)
UPLOAD_TTL_S = 600.0
CLIENT_COOKIE = "playground_client"  # a page's random id: binds an upload to the page that made it
_TOKEN = re.compile(r"[A-Za-z0-9_-]{16,64}")
# Gradio's temporary files in its cache's top folder: tempfile's names ("tmp" and 8 of [a-z0-9_]), no suffix
LEFTOVER = re.compile(r"tmp[a-z0-9_]{8}")
LEFTOVER_S = 60.0  # one this old is left over: Gradio writes and renames an upload's within its request


FORGED = "forged upload path"  # what an upload event gets instead of a path Gradio refused (take_upload refuses it)


def downloads_root() -> Path:
    """Where sessions keep their download files: Gradio's cache (GRADIO_TEMP_DIR), which it serves as is."""
    return Path(get_upload_folder())


def _remove(path: Path) -> None:
    """A file in Gradio's cache, and its folder once empty."""
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()
    except OSError:
        pass


def no_stray_file(button: Any) -> Any:
    """Gradio's UploadButton (type="filepath") creates an empty temporary file in its cache each time it prepares an
    event's upload, and never uses nor removes it (components/upload_button.py, _process_single_file): the zero-byte
    tmp* files of issue 44, one per upload event. This button's events get the upload's path (which Gradio checked)
    with the same file-type check, and nothing is created. Reads UploadButton._process_single_file."""

    def process(file: Any) -> NamedString:
        if button.file_types and not client_utils.is_valid_file(file.path, button.file_types):
            raise GradioError(
                f"Invalid file type. Please upload a file that is one of these formats: {button.file_types}"
            )
        return NamedString(file.path)

    button._process_single_file = process
    return button


def remove_leftovers(older_than_s: float = LEFTOVER_S, now: float | None = None) -> list[str]:
    """Remove Gradio's temporary files (LEFTOVER) in its cache's top folder last changed older_than_s or more before
    `now`: an upload whose parse ended before its file part did, or a part named other than "files" (Gradio's
    upload route never moves those), or another component's empty file (no_stray_file). Returns their names."""
    now = time.time() if now is None else now
    cache = downloads_root()
    removed = []
    for path in list(cache.iterdir()) if cache.is_dir() else []:
        if not LEFTOVER.fullmatch(path.name):
            continue
        try:
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and now - info.st_ctime >= older_than_s:
                path.unlink()
                removed.append(path.name)
        except FileNotFoundError:
            pass
    return removed


class Uploads:
    """The uploads each address holds (paths in Gradio's cache), and who uploaded each (owner()), forgotten once
    removed. One per app (uploads())."""

    is_session = False  # counted in the sessions' budget (ui/budget.py) by its files alone

    def __init__(self) -> None:
        self._held: dict[str, list[str]] = {}
        self._owners: dict[str, set[str]] = {}  # path -> owners (Gradio names an upload's folder by its content)
        self._lock = threading.Lock()
        self.dropped: set[str] = set()  # uploads the budget removed (take() then says so), realpaths
        self.arriving: dict[str, int] = {}  # address -> its uploads being read (UploadLimit), counted as held
        self.turn = asyncio.Lock()  # UploadLimit: one upload in Gradio's upload route at a time

    def holdings(self) -> list[budget.Held]:
        """Every upload still on disk, for the budget: its size, and when it came (as time.monotonic)."""
        out = []
        shift = time.monotonic() - time.time()
        with self._lock:
            paths = {p for held in self._held.values() for p in held}
        for path in paths:
            try:
                info = os.lstat(path)
            except FileNotFoundError:
                continue
            out.append(budget.Held("an upload", info.st_size, info.st_ctime + shift, _dropper(path)))
        return out

    def tell(self, note: str) -> None:
        """Nobody to tell at once: take_upload says so when its page sends it."""

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


def _dropper(path: str):
    def drop(record: Uploads) -> str:
        if len(record.dropped) > 10 * MAX_UPLOADS * MAX_SESSIONS:  # a bound: these paths are only for the message
            record.dropped.clear()
        record.dropped.add(os.path.realpath(path))
        _remove(Path(path))
        return ""

    return drop


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
    try:
        inside = path.resolve().is_relative_to(downloads_root().resolve())
    except (OSError, ValueError):  # not a path at all (a NUL byte, a loop of links): like any file not this page's
        inside = False
    if inside and app is not None and os.path.realpath(path) in uploads(app).dropped:
        uploads(app).dropped.discard(os.path.realpath(path))
        raise PermissionError(
            f"Your upload was removed to keep the server within its memory budget for sessions "
            f"({settings.read().session_mb:,.0f} MB, PLAYGROUND_SESSION_MB): upload it again."
        )
    if app is None or not inside or not uploads(app).take(str(path), owner(http_request)):
        raise PermissionError("Only a file uploaded from this page can be opened: upload it again.")
    try:
        return path.read_bytes()
    finally:
        if not uploads(app).shared(str(path)):
            _remove(path)


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


def answer_forged_paths(demo: Any) -> None:
    """A path Gradio refuses before an event runs (/etc/passwd, ../: InvalidPathError, while preparing the inputs of
    a launched app; a URL it fails to fetch or a NUL byte: ValueError) reached the client as a bare {"error": null}. For an event whose function is marked
    `takes_upload`, the refused value becomes FORGED instead, so that the tab answers with its own message
    (take_upload refuses it as any file this page did not upload). Reads Gradio's Blocks.preprocess_data."""
    original = demo.preprocess_data

    async def preprocess_data(block_fn: Any, inputs: list, state: Any, explicit_call: bool = False) -> Any:
        try:
            return await original(block_fn, inputs, state, explicit_call)
        except (InvalidPathError, ValueError, OSError):  # a URL it failed to fetch, a NUL byte, a name too long
            if not getattr(block_fn.fn, "takes_upload", False):
                raise
            processed = await original(block_fn, [None] + list(inputs[1:]), state, explicit_call)
            return [FORGED] + list(processed[1:])  # the upload's value as the event's function sees it

    demo.preprocess_data = preprocess_data
    refuse_forged_paths(demo)


def forged_path_message(demo: Any, data: Any) -> str | None:
    """Gradio's own refusal of the first file value in an event's inputs that no user uploaded (a path outside its
    cache: /etc/passwd, ../), the message a decoding event's admission check answers with, or None. A URL is left to
    Gradio, as its own check does. Reads processing_utils._check_allowed."""
    files: list[str] = []
    client_utils.traverse(data, lambda d: files.append(d.get("path")) or d, client_utils.is_file_obj_with_meta)
    token = LocalContext.blocks.set(demo)  # the app Gradio's check reads (it checks a launched app's paths)
    try:
        for path in files:
            if isinstance(path, str) and not client_utils.is_http_url_like(path):
                processing_utils._check_allowed(path, check_in_upload_folder=True)
    except (InvalidPathError, ValueError, OSError) as exc:  # ValueError: a NUL byte; OSError: a name too long
        return str(exc) or type(exc).__name__
    finally:
        LocalContext.blocks.reset(token)
    return None


def refuse_forged_paths(demo: Any) -> None:
    """A forged file value (a path no user uploaded) sent to an event without an admission check (Theory, Export, the
    settings link) was refused only once the event ran, as a bare {"error": null}: now every event's join answers it
    as a decoding event's does, HTTP 400 with Gradio's message, before it queues. An event marked `takes_upload`
    keeps its tab's own message (answer_forged_paths). Reads Gradio's Queue.push."""
    queue = demo._queue
    original = queue.push

    async def push(body: Any, request: Any, username: str | None) -> Any:
        try:
            fn = route_utils.get_fn(queue.blocks, None, body)  # as Queue.push finds it
        except (KeyError, route_utils.FnIndexInferError):  # an unknown event: Queue.push answers it
            fn = None
        if fn is None or not getattr(fn.fn, "takes_upload", False):
            message = forged_path_message(demo, body.data)
            if message is not None:
                return False, message, "error"
        return await original(body=body, request=request, username=username)

    queue.push = push
