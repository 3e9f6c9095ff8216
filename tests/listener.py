"""A local HTTP listener that records every request that reaches it (path, headers): the outbound tests read what
was sent, or that nothing was. Its kind says how it answers: like a vLLM server, with a secret it must never have
echoed, with a redirect, or a byte at a time (a slow drip that never trips a per-read timeout)."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

SECRET = "internal-secret: the admin token is hunter2"  # what an internal service answers: never to be echoed


@dataclass
class Seen:
    """What reached a listener: (method, path, headers) per request, and the bytes it dripped so far."""

    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    dripped: int = 0


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        server = self.server
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        server.seen.requests.append((self.command, self.path, dict(self.headers.items())))
        if server.kind == "redirect":
            self.send_response(302)
            self.send_header("Location", server.to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif server.kind == "drip":  # a header that promises a long body, then a byte every drip_s
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(server.drips):
                if server.closing.is_set():
                    return
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:  # the client hung up: what a deadline does
                    return
                server.seen.dripped += 1
                time.sleep(server.drip_s)
        elif server.kind == "vllm":
            self._send(*_vllm_answer(self.path))
        else:  # an internal service: a secret in a 404 page
            self._send(404, SECRET.encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


def _vllm_answer(path: str) -> tuple[int, bytes]:
    """Enough of vLLM's OpenAI-compatible server for VLLMServer.check(): one model, vLLM's metrics, a version."""
    if path == "/v1/models":
        return 200, json.dumps({"object": "list", "data": [{"id": "tiny"}]}).encode()
    if path == "/metrics":
        return 200, b'vllm:num_requests_running{model_name="tiny"} 0.0\n'
    if path == "/version":
        return 200, b'{"version": "0.0-listener"}'
    return 404, b"{}"


@contextlib.contextmanager
def listener(kind: str = "secret", to: str = "", drip_s: float = 0.2, drips: int = 150) -> Iterator[tuple[str, Seen]]:
    """(its URL on 127.0.0.1, what reached it). kind: "secret" (404 with SECRET), "vllm", "redirect" (302 to `to`
    plus the path), "drip" (drips bytes, drip_s apart: 30 s by default, each gap far under any per-read timeout)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.kind, httpd.to, httpd.drip_s, httpd.drips = kind, to, drip_s, drips
    httpd.seen, httpd.closing = Seen(), threading.Event()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", httpd.seen
    finally:
        httpd.closing.set()
        httpd.shutdown()
        httpd.server_close()
