"""The upload route's limits (POST /gradio_api/upload), as ASGI middleware in front of Gradio: what a request says
(its length, its framing), what its address holds, and then the bytes that come, counted as they come; Gradio's
route then sees whole bodies only, one at a time, and what it leaves in its cache is removed. ui/uploads.py keeps
the record of uploads and the sizes (TRACE_BYTES, UPLOAD_BYTES); every size refused gets the app's message
(recorded.too_large), never Gradio's (its max_file_size is never the one that refuses)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse

from playground.run import recorded
from playground.ui import budget, jobs
from playground.ui.uploads import MAX_UPLOADS, UPLOAD_BYTES, UPLOAD_TTL_S, Uploads, owner, remove_leftovers, uploads

NO_FILE = "This upload holds no whole file (a form part named 'files'): nothing was kept."
# Gradio's other route that takes a file (POST .../process_recording: a screen recording, parsed with no limit but
# Gradio's own max_file_size, written to its cache and run through ffmpeg). The app records nothing: refused unread.
NO_RECORDING = "This app takes no screen recordings: nothing was read."


class UploadLimit:
    """ASGI middleware on POST .../upload. Refused, each answer saying what to do: a request of no declared length or
    sent in chunks (411, 400), one that says more than UPLOAD_BYTES (413: the app's message, before a byte is read),
    an address that holds MAX_UPLOADS uploads, those arriving included (429). The body is then read here, counting
    the bytes that come, not what the request said: more than it said, or fewer, is refused (413, 400) and Gradio
    never sees it; a client that leaves mid-body leaves nothing. Gradio's upload route gets the whole body, one
    request at a time (the record's `turn`), and the temporary files it leaves (remove_leftovers) are removed.
    Gradio's recording route (.../process_recording, any method) is refused unread (404, NO_RECORDING)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/").endswith("/process_recording"):
            return await PlainTextResponse(NO_RECORDING, status_code=404)(scope, receive, send)
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].rstrip("/").endswith("/upload"):
            return await self.app(scope, receive, send)
        request = Request(scope)
        record = uploads(scope["app"])
        address = jobs.client_address(request)
        length = request.headers.get("content-length", "")
        refusal = None
        if "transfer-encoding" in request.headers:
            refusal = (400, "An upload must be sent in one piece with its length (Content-Length), not in chunks.")
        elif not length.isdigit():
            refusal = (411, "An upload must say its length (Content-Length).")
        elif int(length) > UPLOAD_BYTES:
            refusal = (413, recorded.too_large(int(length), "This upload"))
        elif len(record.held(address)) + record.arriving.get(address, 0) >= MAX_UPLOADS:
            refusal = (
                429,
                f"Your network address already holds {MAX_UPLOADS} uploads, the most it may: use them, or "
                f"wait until they expire ({UPLOAD_TTL_S / 60:.0f} minutes after each upload).",
            )
        if refusal is not None:
            return await PlainTextResponse(refusal[1], status_code=refusal[0])(scope, receive, send)
        record.arriving[address] = record.arriving.get(address, 0) + 1
        try:
            data = await _body(receive, int(length))
            if data is None:
                return  # the client left before its body came: Gradio never saw it, so no file was written
            if len(data) != int(length):
                code, said = (413, "more") if len(data) > int(length) else (400, "fewer")
                text = (
                    f"This upload sent {said} bytes than its Content-Length said ({int(length):,}): nothing was kept."
                )
                return await PlainTextResponse(text, status_code=code)(scope, receive, send)
            async with record.turn:  # one upload in Gradio's route at a time: the temporary files left are its own
                try:
                    await self.app(scope, _replay(data, receive), self._watching(send, record, address, request))
                finally:
                    remove_leftovers(older_than_s=0.0)
        finally:
            record.arriving[address] -= 1
            if not record.arriving[address]:
                del record.arriving[address]

    @staticmethod
    def _watching(send: Any, record: Uploads, address: str, request: Request) -> Any:
        """`send`, for Gradio's answer: a successful upload's paths are recorded for their owner (and charged to the
        budget); an answer with no file (a body that ended before its file part did) becomes NO_FILE (400)."""
        status, start, body = [0], [{}], []

        async def watching(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                status[0], start[0] = 200, message  # held until the body says whether a file came
                return
            if message["type"] != "http.response.body" or status[0] != 200:
                return await send(message)
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            try:
                paths = json.loads(b"".join(body))
            except ValueError:
                paths = []
            paths = [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []
            if not paths:
                return await PlainTextResponse(NO_FILE, status_code=400)(request.scope, request.receive, send)
            record.add(address, paths, owner(request))
            budget.LEDGER.charge(record)  # may drop the least recently used things of any session
            await send(start[0])
            await send({"type": "http.response.body", "body": b"".join(body)})

        return watching


async def _body(receive: Any, length: int) -> bytes | None:
    """A request's body as it comes, read until it ends or is one byte past `length`; None if the client left."""
    data = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        data += message.get("body", b"")
        if len(data) > length or not message.get("more_body", False):
            return bytes(data)


def _replay(data: bytes, receive: Any) -> Any:
    """`receive` for the app behind: the body read already, in one message, then whatever comes next."""
    sent = [False]

    async def replay() -> dict:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": data, "more_body": False}
        return await receive()

    return replay
