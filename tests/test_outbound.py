"""Requests to a server a user names (playground/env/outbound.py, through vllm.server.VLLMServer, the Compare pairs
tab's vLLM row; issue 35.1-3). Each case against a local listener that records what reached it: nothing when a URL is
refused, never a credential from the server's environment, no redirect followed, a slow drip cut at the call's
deadline, Stop honoured mid-answer, no answer echoed; and an allow-listed loopback server still reached."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Iterator

import pytest

from playground.env import settings
from playground.vllm.engine import Stopped
from playground.vllm.server import VLLMServer
from playground.core.errors import Ended, PlaygroundError
from tests.listener import SECRET, listener


@pytest.fixture(autouse=True)
def server_key(monkeypatch):
    """The server's own vLLM key, as a deployment might set it: it must never leave the machine."""
    monkeypatch.setenv("VLLM_API_KEY", "server-secret-key")
    monkeypatch.delenv("PLAYGROUND_VLLM_URLS", raising=False)


def allow(monkeypatch, *urls: str) -> None:
    monkeypatch.setenv("PLAYGROUND_VLLM_URLS", ",".join(urls))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/admin?x=",
        "http://127.0.0.1:8000/admin#",
        "http://127.0.0.1:8000?",
        "http://127.0.0.1:8000/#",
        "http://user:pw@127.0.0.1:8000",
        "http://127.0.0.1:8000/v2",
        "ftp://127.0.0.1:8000",
        "http://127.0.0.1:8000 /v1",
        "http://127.0.0.1:99999",
        "http://",
        12,
    ],
)
def test_a_url_is_an_origin_and_nothing_else(url):
    """A query or fragment picked the path fetched (".../admin#" fetched /admin); user info would be a credential."""
    with pytest.raises(PlaygroundError, match="give http://host:port|give it as http://host:port"):
        VLLMServer(url)


def test_an_origin_is_normalised():
    from playground.env import outbound

    assert str(outbound.parse_url(" HTTP://GPU-Box:8000/v1/ ")) == "http://gpu-box:8000"
    assert str(outbound.parse_url("https://[::1]")) == "https://[::1]:443"


def test_with_the_allow_list_empty_no_url_is_reached():
    with listener() as (url, seen):
        with pytest.raises(PlaygroundError, match="reaches no vLLM server by URL .*PLAYGROUND_VLLM_URLS"):
            VLLMServer(url, connect_timeout_s=2).check()
        assert seen.requests == []


def test_a_url_not_listed_is_refused_and_reaches_nothing(monkeypatch):
    with listener() as (url, seen), listener() as (other, _):
        allow(monkeypatch, other)
        with pytest.raises(PlaygroundError, match="is not one of the vLLM servers this app may reach"):
            VLLMServer(url, connect_timeout_s=2).check()
        assert seen.requests == []


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "[::ffff:127.0.0.1]",
        "169.254.169.254",
        "10.0.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "0.0.0.0",
        "[::1]",
        "[fe80::1]",
        "224.0.0.1",
    ],
)
def test_with_any_public_server_allowed_internal_addresses_are_still_refused(monkeypatch, host):
    """`*` admits public servers only: loopback (by address or by a DNS name), cloud metadata (link-local),
    private and shared networks, multicast and the unspecified address are refused before any connection."""
    with listener() as (url, seen):
        allow(monkeypatch, "*")
        port = url.rsplit(":", 1)[1]
        with pytest.raises(PlaygroundError, match="resolves to an address this app does not reach"):
            VLLMServer(f"http://{host}:{port}", connect_timeout_s=2).check()
        assert seen.requests == []


def test_this_machines_own_addresses_are_told_apart():
    """The app's own address on any interface: an address this machine can bind is its own."""
    from playground.env import outbound

    own = socket.gethostbyname(socket.gethostname())
    assert outbound._this_machine(outbound.ipaddress.ip_address(own))
    assert not outbound._this_machine(outbound.ipaddress.ip_address("192.0.2.1"))  # TEST-NET-1: never local


def test_a_listed_loopback_server_is_reached_with_no_credential_from_the_environment(monkeypatch):
    with listener("vllm") as (url, seen):
        allow(monkeypatch, url)
        info = VLLMServer(url + "/v1", connect_timeout_s=5).check()
        assert info.model == "tiny" and info.version == "0.0-listener"
        assert [path for _, path, _ in seen.requests] == ["/v1/models", "/metrics", "/version"]
        assert all("Authorization" not in headers for _, _, headers in seen.requests)  # VLLM_API_KEY stays here


def test_a_key_the_user_gave_goes_to_that_server_alone_and_is_never_shown(monkeypatch):
    with listener("vllm") as (url, seen), listener() as (down, _):
        allow(monkeypatch, url, down)
        server = VLLMServer(url, connect_timeout_s=5, api_key="user-typed-key")
        server.check()
        assert {headers.get("Authorization") for _, _, headers in seen.requests} == {"Bearer user-typed-key"}
        assert "user-typed-key" not in repr(server)
        with pytest.raises(PlaygroundError) as refused:
            VLLMServer(down, connect_timeout_s=5, api_key="user-typed-key").check()
        assert "user-typed-key" not in str(refused.value)


def test_a_redirect_is_not_followed(monkeypatch):
    with listener("vllm") as (second, reached), listener("redirect", to=second) as (first, seen):
        allow(monkeypatch, first, second)
        with pytest.raises(PlaygroundError, match="is not a vLLM server: GET /v1/models answered HTTP 302"):
            VLLMServer(first, connect_timeout_s=5).check()
        assert [path for _, path, _ in seen.requests] == ["/v1/models"]
        assert reached.requests == []


def test_no_answer_is_echoed_in_a_message(monkeypatch):
    with listener() as (url, seen):
        allow(monkeypatch, url)
        with pytest.raises(PlaygroundError, match="answered HTTP 404") as refused:
            VLLMServer(url, connect_timeout_s=5).check()
        assert seen.requests and "hunter2" not in str(refused.value) and SECRET not in str(refused.value)


def test_a_slow_drip_is_cut_at_the_calls_deadline(monkeypatch):
    """A byte every 0.2 s never trips a per-read timeout: the old client read it for as long as it dripped (30 s
    here, the device queue held meanwhile). One deadline for the whole call ends it."""
    with listener("drip") as (url, seen):
        allow(monkeypatch, url)
        with pytest.raises(PlaygroundError, match=r"did not answer /v1/models within 1 s \(the whole answer"):
            VLLMServer(url, connect_timeout_s=1.0).check()
        assert seen.requests and seen.dripped < 150  # cut off before the drip ended


def test_stop_ends_a_call_mid_answer(monkeypatch):
    with listener("drip") as (url, seen):
        allow(monkeypatch, url)
        server = VLLMServer(url, connect_timeout_s=60.0, should_stop=lambda: seen.dripped >= 3)
        with pytest.raises(Stopped) as stopped:
            server.check()
        assert isinstance(stopped.value, Ended) and seen.dripped < 150


def test_the_allow_list_is_read_and_checked():
    assert settings.read({}).vllm_urls == ()  # empty by default: only vLLM started here
    read = settings.read({"PLAYGROUND_VLLM_URLS": "http://127.0.0.1:8000/v1, *, https://GPU-box"}).vllm_urls
    assert read == ("http://127.0.0.1:8000", "*", "https://gpu-box:443")
    for bad in ("http://a:1/x", "http://u:p@a:1", "http://a:1#", "gpu-box:8000"):
        with pytest.raises(PlaygroundError, match="PLAYGROUND_VLLM_URLS"):
            settings.read({"PLAYGROUND_VLLM_URLS": bad})


def test_a_tls_handshake_that_fails_is_named(monkeypatch):
    with listener("vllm") as (url, seen):
        https = url.replace("http://", "https://")
        allow(monkeypatch, https)
        with pytest.raises(PlaygroundError, match=r"Cannot reach a vLLM server at https://.* \(TLS: "):
            VLLMServer(https, connect_timeout_s=5).check()


# ---------------------------------------------------------------- issue 55: no header can be injected


@contextlib.contextmanager
def raw_listener() -> Iterator[tuple[str, list[bytes]]]:
    """(URL on 127.0.0.1, the raw bytes of each connection's request head): what reached the socket, unparsed."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    heads: list[bytes] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                heads.append(data.split(b"\r\n\r\n")[0])
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", heads
    finally:
        done.set()
        thread.join()
        sock.close()


INJECTED = ["x\r\nX-Injected: yes", "x\nX-Injected: yes", "x\rX-Injected: yes", "x\x00y", "x\x7fy", "x\ty", "clé"]


@pytest.mark.parametrize("key", INJECTED)
def test_a_key_with_a_line_break_or_control_character_is_refused_naming_the_field_before_any_socket(monkeypatch, key):
    """The key `x\\r\\nX-Injected: yes` sent X-Injected on every request (outbound wrote raw `f"{k}: {v}"` lines)."""
    from playground.vllm import peer

    with raw_listener() as (url, heads):
        allow(monkeypatch, url)
        with pytest.raises(PlaygroundError, match="vLLM server API key: only printable ASCII") as refused:
            peer.engine_choice(peer.VLLM_URL, url, "", "", key)
        with pytest.raises(PlaygroundError, match="vLLM server API key"):
            VLLMServer(url, connect_timeout_s=2, api_key=key).check()
        assert "Injected" not in str(refused.value) and key not in str(refused.value)  # never quoted: it is a key
    assert heads == []  # nothing reached the socket


@pytest.mark.parametrize(
    "headers",
    [{"X-Note": "a\r\nX-Injected: yes"}, {"X-Note": "a\nb"}, {"X-Note\r\nX-Injected": "yes"}, {"X Note": "a"}],
)
def test_every_header_the_app_sends_is_checked_before_any_socket(monkeypatch, headers):
    from playground.env import outbound

    with raw_listener() as (url, heads):
        allow(monkeypatch, url)
        policy, origin = outbound.Policy.of([url]), outbound.parse_url(url)
        with pytest.raises(outbound.Refused, match="header.*nothing was sent"):
            outbound.request(policy, origin, "GET", "/v1/models", None, headers, 2.0)
        with pytest.raises(outbound.Refused, match="nothing was sent"):
            outbound.request(policy, origin, "GET", "/v1/models\r\nX-Injected: yes", None, {}, 2.0)
    assert heads == []


def test_what_reaches_the_socket_is_one_line_per_header_the_app_meant(monkeypatch):
    with raw_listener() as (url, heads):
        allow(monkeypatch, url)
        with pytest.raises(PlaygroundError, match="not a vLLM server"):
            VLLMServer(url, connect_timeout_s=2, api_key="a-good-key_123").check()
    (head,) = heads
    lines = head.split(b"\r\n")
    assert all(b"\r" not in line and b"\n" not in line for line in lines)
    names = [line.split(b":")[0].lower() for line in lines[1:]]
    assert names == [b"host", b"connection", b"accept-encoding", b"user-agent", b"authorization"]
    assert b"Authorization: Bearer a-good-key_123" in lines
