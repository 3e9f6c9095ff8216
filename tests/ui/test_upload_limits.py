"""Gradio's cache keeps no stray files, and every upload size gets the app's own message (issue 44).

- Zero-byte tmp* files stayed in Gradio's cache past the upload expiry: Gradio's UploadButton made one for every
  upload event (uploads.no_stray_file), and its upload route leaves a part's temporary file when the body ends
  before the part does or the part is not named "files"; the reaper removes any left (uploads.remove_leftovers).
- Three limits disagreed: a trace at most 1,000,000 bytes (recorded.MAX_BYTES), Gradio's max_file_size "1mb"
  (1,048,576 bytes a file) and the upload route's 1,065,536 bytes a request, so between them Gradio's own message
  came. Now a file over TRACE_BYTES gets the app's message wherever it is refused, and Gradio's check (at
  UPLOAD_BYTES a file) can never be the one: a file is smaller than the request the route let through.
- A body is counted as it comes (ui/upload_limit.py): more bytes than its Content-Length said, a chunked body, a
  client that leaves mid-body or a body with no whole file is refused with the app's message and leaves nothing.

On a real Blocks behind a test client, and the real app (build_demo) where its upload event is the subject."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path

import gradio as gr
import pytest
import uvicorn
from conftest import free_port
from starlette.testclient import TestClient
from test_sessions import ALICE, as_page, open_upload

from playground.run import recorded
from playground.ui import build_demo, launch_options, sessions, upload_limit, uploads

TRACE = (Path(__file__).resolve().parents[2] / "assets" / "runs" / "story.json").read_bytes()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """Gradio's cache (GRADIO_TEMP_DIR) in a test folder."""
    folder = tmp_path / "gradio-cache"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(folder))
    return folder


def loose_files(cache: Path) -> list[str]:
    """The files in the cache's top folder (uploads and downloads live in folders inside it)."""
    return sorted(p.name for p in cache.iterdir() if not p.is_dir()) if cache.is_dir() else []


def stored(cache: Path) -> list[Path]:
    """Every file in the cache, in any folder."""
    return [p for p in cache.rglob("*") if p.is_file()]


def the_app(runner) -> tuple[gr.Blocks, object]:
    demo = build_demo(runner)
    demo.max_file_size = gr.utils._parse_file_size(launch_options()["max_file_size"])  # as launch() sets it
    return demo, gr.routes.App.create_app(demo, app_kwargs=dict(launch_options()["app_kwargs"], lifespan=None))


def test_opening_uploaded_traces_leaves_no_file_in_gradios_cache(tiny_catalog, runner, cache):
    """Each 'Open a trace JSON' left an empty tmp* file in the cache's top folder, never removed (48 after the
    probes). Now three opened traces leave nothing: each upload is removed once used, and no empty file is made."""
    demo, app = the_app(runner)
    with TestClient(app) as client:
        client.get("/gradio_api/startup-events")
        for i in range(3):
            as_page(client, ALICE)
            path = client.post("/gradio_api/upload", files={"files": ("run.json", TRACE + b" " * i)}).json()[0]
            assert "Recorded run (the file" in open_upload(client, demo, path, ALICE)
    assert stored(cache) == []


def test_the_reaper_removes_gradios_temporary_files_left_in_its_cache(cache):
    """Whatever leaves one (an older run of the app, an upload cut short), the reaper's sweep_cache removes
    Gradio's temporary files from the cache's top folder once LEFTOVER_S old, and nothing else."""
    with gr.Blocks() as demo:
        gr.Textbox()
    cache.mkdir(parents=True)
    (cache / "tmpa1b2c3d_").write_bytes(b"")
    (cache / "tmpzz99yy88").write_bytes(b"part of an upload")
    kept = [cache / "tmpabcdefgh.mp4", cache / "notes.txt", cache / "hash1" / "tmpabcdefgh"]  # not Gradio's leftovers
    for path in kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    now = time.time()
    sessions.sweep_cache(now)
    assert len(loose_files(cache)) == 4  # fresh: an upload's parse may be writing it
    sessions.sweep_cache(now + uploads.LEFTOVER_S + 1)
    assert loose_files(cache) == ["notes.txt", "tmpabcdefgh.mp4"] and all(p.exists() for p in kept)


SIZES = [
    uploads.TRACE_BYTES,
    uploads.TRACE_BYTES + 1,
    uploads.UPLOAD_BYTES - 400,  # a file the route lets through (its form adds about 200 bytes): the tab refuses it
    uploads.UPLOAD_BYTES,
    2**20,  # Gradio's old limit, 1 MiB
    2**20 + 1,
    1_065_000,
    1_065_537,  # past the route's old limit
    1_500_000,
]


def test_every_upload_size_gets_the_apps_own_message(tiny_catalog, runner, cache):
    """Issue 44: between 1 MiB and 1,065 KB Gradio's own message came ("File size exceeded maximum allowed size of
    1048576 bytes."). Now each size is either refused by the route (413) or, once opened, by the tab, with the app's
    message naming the one limit; a trace of TRACE_BYTES opens."""
    demo, app = the_app(runner)
    with TestClient(app) as client:
        client.get("/gradio_api/startup-events")
        for size in SIZES:
            as_page(client, ALICE)
            data = TRACE + b" " * (size - len(TRACE))
            answer = client.post("/gradio_api/upload", files={"files": ("run.json", data)})
            assert "exceeded maximum allowed size" not in answer.text, (size, answer.text)
            if answer.status_code == 413:
                assert answer.text.startswith("This upload is too large: ") and size > uploads.TRACE_BYTES
                assert "a trace file may be at most 1,000,000 bytes (1 MB)." in answer.text
                continue
            assert answer.status_code == 200, (size, answer.status_code, answer.text)
            status = open_upload(client, demo, answer.json()[0], ALICE)
            if size <= uploads.TRACE_BYTES:
                assert "Recorded run (the file" in status, (size, status)
            else:
                assert recorded.too_large(size) in status and "status-error" in status, (size, status)
    assert loose_files(cache) == []


def form(parts: list[tuple[str, bytes]], boundary: str = "b0und") -> tuple[bytes, str]:
    """A multipart body of (field name, file bytes) parts, and its Content-Type."""
    body = b"".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="r{i}.json"\r\n\r\n'.encode()
        + data
        + b"\r\n"
        for i, (name, data) in enumerate(parts)
    )
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def small_app() -> object:
    """Gradio's app for a page with the Run tab's upload button, behind the app's middleware, as launched."""
    with gr.Blocks() as demo:
        button = uploads.no_stray_file(gr.UploadButton(type="filepath"))
        button.upload(lambda path: None, button, None)
    demo.max_file_size = uploads.MAX_FILE_SIZE
    return gr.routes.App.create_app(demo, app_kwargs=dict(sessions.launch_kwargs()["app_kwargs"], lifespan=None))


def post_asgi(
    app, headers: dict[str, str], chunks: list[bytes], leaves: bool = False, path: str = "/gradio_api/upload"
) -> tuple[int, str, int]:
    """POST `path` (Gradio's upload route) straight to the ASGI app, its body in `chunks` as a server would pass them (whatever
    the headers say), then the client leaving if `leaves`. Returns (status, text, chunks the app read)."""
    messages = [
        {"type": "http.request", "body": c, "more_body": leaves or i < len(chunks) - 1} for i, c in enumerate(chunks)
    ]
    read, sent = [0], []

    async def receive() -> dict:
        read[0] += 1
        return messages[read[0] - 1] if read[0] <= len(messages) else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 7860),
    }
    asyncio.run(app(scope, receive, send))
    start = next((m for m in sent if m["type"] == "http.response.start"), {"status": 0})
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
    return start["status"], text, min(read[0], len(messages))


def test_the_bytes_that_come_are_counted_not_what_the_request_said(cache):
    """Issue 44: a request whose Content-Length said 100 bytes but that sent 5 MiB was answered 200 OK. The route
    now counts the body's bytes as they come and stops reading one chunk past what the request said."""
    body, kind = form([("files", bytes([65 + i]) * 900_000) for i in range(6)])  # 5.4 MB: six files under 1 MB
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    status, text, read = post_asgi(small_app(), {"content-type": kind, "content-length": "100"}, chunks)
    assert (status, text) == (413, "This upload sent more bytes than its Content-Length said (100): nothing was kept.")
    assert read <= 2 and stored(cache) == []


@pytest.mark.parametrize("path", ["/gradio_api/process_recording", "/gradio_api/process_recording/"])
def test_gradios_recording_route_is_refused_unread(cache, path):
    """Issue 44: Gradio's other file route (a screen recording, parsed up to Gradio's own size limit, written to its
    cache, passed to ffmpeg) sat outside the upload limit. The app records nothing: it is refused before a byte is
    read, and leaves nothing in the cache."""
    body, kind = form([("video", b"\x00" * 2_000_000)], boundary="rec")
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    status, text, read = post_asgi(
        small_app(), {"content-type": kind, "content-length": str(len(body))}, chunks, path=path
    )
    assert (status, text, read) == (404, upload_limit.NO_RECORDING, 0)
    assert stored(cache) == []


@pytest.mark.parametrize("case", ["cut short", "left mid-body", "not named files", "ends before its file"])
def test_a_body_that_holds_no_whole_file_leaves_nothing_and_says_so(cache, case):
    """A client that leaves mid-body left Gradio's temporary file of the part (its parse raised), and so did a body
    that ended before its part, or a part not named "files": answered 200 with [] and a tmp* file stayed."""
    body, kind = form([("other" if case == "not named files" else "files", b"{}" * 5000)])
    if case == "ends before its file":
        body = body[: body.index(b"\r\n\r\n") + 4 + 100]  # the part's headers and 100 bytes of its file
    headers = {"content-type": kind, "content-length": str(len(body))}
    if case == "cut short":
        headers["content-length"] = str(len(body) + 1000)  # what a server passes on when the client stops early
    status, text, _ = post_asgi(small_app(), headers, [body[:200], body[200:]], leaves=case == "left mid-body")
    if case == "left mid-body":
        assert status == 0  # nobody to answer
    elif case == "cut short":
        assert (status, text) == (
            400,
            f"This upload sent fewer bytes than its Content-Length said ({len(body) + 1000:,}): nothing was kept.",
        )
    else:
        assert (status, text) == (400, upload_limit.NO_FILE)
    assert stored(cache) == []


@pytest.fixture
def server(cache):
    """The small app served by uvicorn as Gradio serves it (its HTTP parser: h11 here), on loopback."""
    port = free_port()
    served = uvicorn.Server(
        uvicorn.Config(small_app(), host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    while not served.started and thread.is_alive():
        time.sleep(0.05)
    yield port
    served.should_exit = True
    thread.join()


def exchange(port: int, head: bytes, body: bytes) -> bytes:
    """Send a request's head and body on one connection; what comes back until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(head)
        try:
            conn.sendall(body)
        except ConnectionError:  # the server answered and closed before reading it all
            pass
        answer = b""
        try:
            while chunk := conn.recv(65536):
                answer += chunk
        except ConnectionError:
            pass
    return answer


def test_over_a_socket_the_body_is_what_content_length_frames_and_chunks_are_refused(server, cache):
    """Where the body's size is enforced, as served: uvicorn's HTTP parser (h11) hands the app exactly the bytes
    Content-Length says; what follows is parsed as the next request on the connection (uvicorn answers it 400
    "Invalid HTTP request received." and closes). A chunked body (Transfer-Encoding, which h11 prefers to any
    Content-Length) had its size unchecked: 5.4 MB under "Content-Length: 100" was kept as six files."""
    body, kind = form([("files", bytes([65 + i]) * 900_000) for i in range(6)])
    head = f"POST /gradio_api/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {kind}\r\nContent-Length: 100\r\n"
    answer = exchange(server, (head + "\r\n").encode(), body + b"x" * (5 * 2**20 - len(body)))
    assert answer.startswith(b"HTTP/1.1 400 ") and upload_limit.NO_FILE.encode() in answer  # its 100 bytes
    assert b"Invalid HTTP request received." in answer  # the rest: not this body
    chunked = b"".join(
        b"%x\r\n%s\r\n" % (len(body[i : i + 65536]), body[i : i + 65536]) for i in range(0, len(body), 65536)
    )
    answer = exchange(
        server, (head + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode(), chunked + b"0\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 400 ") and b"not in chunks" in answer
    assert stored(cache) == []


@pytest.mark.parametrize("size", ["1500000", 1_500_000, "<img src=x onerror=alert(1)>", "9" * 5000, None, "12"])
def test_the_pages_too_large_event_says_the_limit_and_changes_nothing_else(tiny_catalog, runner, size):
    """The hidden button's event (the page's size check hands it the size of a file it did not send): the app's
    message in the status line, the size only when it is a plain number over the limit, every other output unchanged."""
    demo = build_demo(runner)
    event = next(f for f in demo.fns.values() if f.fn.__name__ == "on_too_large")
    answer = event.fn(size)
    status, others = answer[0], answer[1:]
    plain = str(size) in ("1500000",)
    said = "1,500,000 bytes; " if plain else ""
    assert (
        f"The file is too large: {said}a trace file may be at most 1,000,000 bytes (1 MB). It was not sent." in status
    )
    assert "status-error" in status and "<img" not in status and "9999" not in status
    assert all(isinstance(v, type(gr.skip())) and v == gr.skip() for v in others)
