"""Requests to a server a user names (the Compare pairs tab's vLLM URL): where they may go, and how long they may take.

- Where: only to the servers the operator allows (PLAYGROUND_VLLM_URLS, settings.py): each listed origin
  (scheme://host:port) as it is, even on loopback or a private network, and with `*` any other server whose every
  address is public. A host is resolved once and every address it resolves to is checked (a DNS name of a private
  address is refused like the address); the connection goes to those checked addresses only, so a name that
  resolves elsewhere later (DNS rebinding) changes nothing. Loopback, link-local (cloud metadata at
  169.254.169.254), private, shared, multicast, reserved and this machine's own addresses are refused unless listed.
- What: a URL is an origin and nothing else: http(s), a host, a port, at most `/v1`; user info, a query, a fragment or
  another path is refused (they would pick what is fetched). No proxy from the environment, no redirect followed
  (an answer of 3xx is just a status), no credential but the one the caller hands in.
- How long: one deadline for the whole call (connect, send, every byte of the answer), so a server that drips a
  byte every few seconds is cut off, and a stall deadline (no byte for a few seconds ends it, from the request sent
  or, for an answer the server must think about first, from its first byte); Stop (should_stop) is read every TICK_S.
  The answer is bounded (MAX_ANSWER bytes) and never quoted in a message.
Standard library only (no torch, no gradio): settings.py reads the allow-list with parse_url.
"""

from __future__ import annotations

import errno
import http.client
import io
import os
import ipaddress
import select
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Iterable

from playground.core.errors import Ended, PlaygroundError, shown

TICK_S = 0.25  # how often a waiting call reads Stop and its deadline
MAX_ANSWER = 16 * 1024 * 1024  # bytes: a /metrics of a large server is a few hundred kB
ANY_PUBLIC = "*"  # the allow-list entry that admits any server whose every address is public
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")  # a header's name


class Refused(PlaygroundError):
    """A URL or an address this app does not reach; nothing was sent."""


class TimedOut(PlaygroundError):
    """The whole call took longer than its deadline."""


class Stopped(Ended):
    """Stop was pressed during the call."""


def check_header(name: str, value: str, field: str | None = None) -> None:
    """Refused unless a header can only be one line: its name an HTTP token, its value printable ASCII (no CR, LF or
    other control character, which would end the line and start a header of the sender's choosing). `field` names
    the input the value came from; the value itself is never quoted (it may be a key)."""
    what = field or f"The {name!r} header"
    if not isinstance(name, str) or not name or not set(name) <= _TOKEN:
        raise Refused(f"{what}: a header name may hold only letters, digits and -; nothing was sent.")
    if not isinstance(value, str) or any(not " " <= c <= "~" for c in value):
        raise Refused(f"{what}: only printable ASCII is taken (no line break or control character); nothing was sent.")


@dataclass(frozen=True)
class Origin:
    """scheme://host:port, the whole of a server's address as this app takes it."""

    scheme: str
    host: str  # lower case; an IPv6 address without brackets
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_url(text: object, what: str = "vLLM server URL") -> Origin:
    """A URL as an Origin, or Refused naming what is wrong with it (`what` names the field)."""
    if not isinstance(text, str) or len(text) > 500:
        raise Refused(f"{what}: give it as http://host:port (at most 500 characters), got {shown(text)}.")
    raw = text.strip()
    if not raw.isprintable() or any(c.isspace() for c in raw):
        raise Refused(f"{what} {shown(raw)}: give it as http://host:port, without spaces.")
    try:
        parts = urllib.parse.urlsplit(raw)
        port = parts.port
    except ValueError:
        raise Refused(f"{what} {shown(raw)}: give it as http://host:port (the port a number to 65535).") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise Refused(f"{what} {shown(raw)}: give it as http://host:port.")
    if "@" in parts.netloc:  # user info would be sent as a credential
        raise Refused(f"{what} {shown(raw)}: a user name or password in the URL is not taken; give http://host:port.")
    if "?" in raw or "#" in raw:  # a query or fragment picks the path fetched
        raise Refused(f"{what} {shown(raw)}: a query (?) or fragment (#) is not taken; give http://host:port.")
    if parts.path.rstrip("/") not in ("", "/v1"):
        raise Refused(f"{what} {shown(raw)}: a path is not taken (at most /v1); give http://host:port.")
    scheme = parts.scheme.lower()
    return Origin(scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80))


# ---------------------------------------------------------------- where a request may go


def _unreachable(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """An address a user-typed URL may not reach: anything not public, or public only by an embedding."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None and _unreachable(embedded):
            return True
    return (
        not ip.is_global
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_private
    )


def _this_machine(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """An address of this machine (the app's own, on any port): only a local address can be bound."""
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((str(ip), 0))
        return True
    except OSError:
        return False


class Policy:
    """The servers requests may go to: `listed` origins as they are, and with any_public every public one."""

    def __init__(self, listed: Iterable[Origin] = (), any_public: bool = False) -> None:
        self.listed, self.any_public = frozenset(listed), any_public

    @classmethod
    def of(cls, entries: Iterable[str]) -> "Policy":
        """The policy of PLAYGROUND_VLLM_URLS's entries (settings.read().vllm_urls: origins, and "*")."""
        entries = tuple(entries)
        return cls((parse_url(e, "PLAYGROUND_VLLM_URLS") for e in entries if e != ANY_PUBLIC), ANY_PUBLIC in entries)

    @property
    def open(self) -> bool:
        """Whether any server by URL may be reached at all."""
        return bool(self.listed) or self.any_public

    def admit(self, origin: Origin) -> None:
        """Refused unless the origin is listed or any public server may be reached (its addresses checked later)."""
        if origin in self.listed or self.any_public:
            return
        if not self.open:
            raise Refused(
                "This app reaches no vLLM server by URL (its operator lists none in PLAYGROUND_VLLM_URLS): "
                "choose vLLM started here."
            )
        raise Refused(
            f"{origin} is not one of the vLLM servers this app may reach: "
            f"{', '.join(sorted(map(str, self.listed)))} (PLAYGROUND_VLLM_URLS)."
        )

    def addresses(self, origin: Origin) -> list[tuple]:
        """The addresses to connect to (getaddrinfo's sockaddrs), every one checked; Refused when any is not allowed."""
        self.admit(origin)
        try:
            infos = socket.getaddrinfo(origin.host, origin.port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError):
            raise PlaygroundError(f"Cannot find the host of {origin} (its name does not resolve).") from None
        found = [
            (family, sockaddr) for family, _, _, _, sockaddr in infos if family in (socket.AF_INET, socket.AF_INET6)
        ]
        if not found:
            raise PlaygroundError(f"Cannot find the host of {origin} (no IPv4 or IPv6 address).")
        if origin not in self.listed:  # reached as "any public server": every address it resolves to must be one
            for _, sockaddr in found:
                ip = ipaddress.ip_address(sockaddr[0].split("%")[0])
                if _unreachable(ip) or _this_machine(ip):
                    raise Refused(
                        f"{origin} resolves to an address this app does not reach (loopback, link-local, "
                        "private or this machine's own) unless its operator lists the server in "
                        "PLAYGROUND_VLLM_URLS."
                    )
        return found


# ---------------------------------------------------------------- one request, one deadline


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


class _Clock:
    """The call's deadline, its stall deadline and Stop: left() is the seconds to wait now (at most TICK_S), or it
    raises. stall_s: no byte for that long ends the call, counted from the request sent when first_byte_s is None,
    else from the first byte of the answer (a server may think first_byte_s before it answers, then must flow)."""

    def __init__(
        self, origin: Origin, path: str, deadline_s: float, should_stop, stall_s=None, first_byte_s=None
    ) -> None:
        self.origin, self.path, self.deadline_s = origin, path, deadline_s
        self.end, self.should_stop = time.monotonic() + deadline_s, should_stop
        self.stall_s, self.first_byte_s, self.heard, self.last = stall_s, first_byte_s, False, time.monotonic()

    def byte(self, heard: bool) -> None:
        """The request went out, or (heard) a byte of the answer came: the stall deadline starts again."""
        self.heard, self.last = self.heard or heard, time.monotonic()

    def left(self) -> float:
        if self.should_stop is not None and self.should_stop():
            raise Stopped(f"Stopped: the request to {self.origin} was ended.")
        now, left = time.monotonic(), self.end - time.monotonic()
        quiet = self.first_byte_s if not self.heard and self.first_byte_s is not None else self.stall_s
        if quiet is not None and now - self.last > quiet:
            raise TimedOut(
                f"The server at {self.origin} sent nothing for {quiet:.0f} s during {self.path} "
                f"({'before its answer' if not self.heard else 'mid-answer'}): the request was ended."
            )
        if left <= 0:
            raise TimedOut(
                f"The server at {self.origin} did not answer {self.path} within {self.deadline_s:.0f} s "
                "(the whole answer, however slowly it came)."
            )
        return min(left, TICK_S)

    def wait(self, sock: socket.socket, writing: bool) -> None:
        select.select([] if writing else [sock], [sock] if writing else [], [], self.left())


class Unreachable(PlaygroundError):
    """No address of the server accepted a connection; `reason` says what the last one answered."""

    def __init__(self, origin: Origin, reason: str) -> None:
        super().__init__(f"Cannot reach a server at {origin} ({reason}).")
        self.reason = reason


def _connect(addresses: list[tuple], origin: Origin, clock: _Clock) -> socket.socket:
    reason = "no address answered"
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)  # every wait below is a select() bounded by the clock
        try:
            error = sock.connect_ex(sockaddr)
            if error in (errno.EINPROGRESS, errno.EWOULDBLOCK):
                while not select.select([], [sock], [], clock.left())[1]:
                    pass
                error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                raise OSError(error, os.strerror(error))
        except OSError as exc:
            sock.close()
            reason = (exc.strerror or str(exc)).lower()
            continue
        except BaseException:
            sock.close()
            raise
        if origin.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(
                sock, server_hostname=origin.host, do_handshake_on_connect=False
            )
            try:
                _io(sock, clock, False, sock.do_handshake)
            except OSError as exc:  # ssl.SSLError is one: a certificate refused, a server that is not TLS
                sock.close()
                raise Unreachable(origin, f"TLS: {getattr(exc, 'reason', None) or exc.strerror or 'handshake failed'}")
            except BaseException:
                sock.close()
                raise
        return sock
    raise Unreachable(origin, reason)


def _io(sock: socket.socket, clock: _Clock, writing: bool, step: Callable, *args):
    """One non-blocking socket step, retried until it can go on, the deadline passes or Stop comes."""
    while True:
        try:
            return step(*args)
        except ssl.SSLWantWriteError:
            clock.wait(sock, True)
        except ssl.SSLWantReadError:
            clock.wait(sock, False)
        except BlockingIOError:
            clock.wait(sock, writing)


class _Received:
    """The bytes of a response so far, and whether they are all of it (by its length or its last chunk; else the
    server's close ends it)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self._body_at: int | None = None
        self._length: int | None = None
        self._chunked = False

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if self._body_at is None:
            at = self.data.find(b"\r\n\r\n")
            if at >= 0:
                self._body_at = at + 4
                head = bytes(self.data[:at]).split(b"\r\n", 1)[-1] + b"\r\n\r\n"
                headers = http.client.parse_headers(io.BytesIO(head))
                self._chunked = (headers.get("Transfer-Encoding") or "").lower() == "chunked"
                length = (headers.get("Content-Length") or "").strip()
                self._length = int(length) if length.isdigit() else None

    @property
    def complete(self) -> bool:
        if self._body_at is None:
            return False
        if self._chunked:
            return self.data.endswith(b"0\r\n\r\n")
        return self._length is not None and len(self.data) - self._body_at >= self._length


class _Bytes:
    """What http.client.HTTPResponse reads a finished response from."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def makefile(self, *_: object) -> io.BytesIO:
        return io.BytesIO(self._data)


def request(
    policy: Policy,
    origin: Origin,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    deadline_s: float = 10.0,
    should_stop: Callable[[], bool] | None = None,
    addresses: list[tuple] | None = None,
    stall_s: float | None = None,
    first_byte_s: float | None = None,
) -> Answer:
    """One HTTP request to an allowed origin within deadline_s in all, never stall_s without a byte (_Clock: after the
    first byte when first_byte_s is given); raises Refused, TimedOut, Stopped or a PlaygroundError (unreachable, not
    HTTP). `addresses`: those policy.addresses() gave before (kept per server)."""
    if method not in ("GET", "POST") or not path.startswith("/") or any(not "!" <= c <= "~" for c in path):
        raise Refused(f"Not a request this app sends: {method} {shown(path)}; nothing was sent.")
    for name, value in (headers or {}).items():  # before any socket opens: a CR or LF would add headers
        check_header(name, value)
    clock = _Clock(origin, path, deadline_s, should_stop, stall_s, first_byte_s)
    addresses = addresses if addresses is not None else policy.addresses(origin)
    host = f"[{origin.host}]" if ":" in origin.host else origin.host
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}:{origin.port}",
        "Connection: close",
        "Accept-Encoding: identity",
        "User-Agent: spec-playground",
    ]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b"")
    sock = _connect(addresses, origin, clock)
    try:
        sent = 0
        while sent < len(data):
            sent += _io(sock, clock, True, sock.send, data[sent:])
            clock.byte(False)
        received = _Received()
        while not received.complete:
            chunk = _io(sock, clock, False, sock.recv, 65536)
            if not chunk:
                break
            received.add(chunk)
            clock.byte(True)
            if len(received.data) > MAX_ANSWER:
                raise PlaygroundError(
                    f"The server at {origin} answered {path} with more than "
                    f"{MAX_ANSWER // 2**20} MB: not what a vLLM server sends."
                )
            clock.left()
    except OSError as exc:
        raise PlaygroundError(
            f"The server at {origin} dropped the connection during {path} ({exc.strerror or type(exc).__name__})."
        ) from None
    finally:
        sock.close()
    try:
        response = http.client.HTTPResponse(_Bytes(bytes(received.data)))  # type: ignore[arg-type]
        response.begin()
        return Answer(response.status, response.read())
    except (http.client.HTTPException, ValueError):
        raise PlaygroundError(f"The server at {origin} did not answer {path} in HTTP.") from None
