"""The bounds a client meets on a connection before it is authenticated, against a real
`gateway serve` over raw sockets: header size and time, body time, and what the server writes
back."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from urllib.parse import urlsplit

import orjson
import pytest

from gateway.http.server import _HeadWithBody
from tests.conftest import API_KEYS
from tests.processes import serving

# Short bounds for the test; the defaults (README) are 16 KiB, 10 s and 30 s.
HEADER_SECONDS, BODY_SECONDS = 1.0, 2.0
# How long the test waits for the server to act on a bound: generous on a busy machine,
# and still far below what an unbounded server would allow (forever).
PATIENCE = 30.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway with API keys and its own embedded Redis (other tests flush theirs)."""
    with serving(
        tmp_path_factory.mktemp("boundary"),
        GATEWAY_API_KEYS=orjson.dumps(API_KEYS).decode(),
        GATEWAY_HEADER_TIMEOUT_SECONDS=str(HEADER_SECONDS),
        GATEWAY_BODY_TIMEOUT_SECONDS=str(BODY_SECONDS),
    ) as (_, base):
        yield base


@contextmanager
def connection(base: str) -> Iterator[socket.socket]:
    host, port = urlsplit(base).hostname, urlsplit(base).port
    with socket.create_connection((host, port), timeout=PATIENCE) as sock:
        try:
            yield sock
        finally:
            _AHEAD.pop(sock.fileno(), None)


def answer_and_close(sock: socket.socket, trickle: bytes = b"") -> bytes:
    """Everything the server sends until it closes the connection, sending ``trickle`` a
    byte at a time meanwhile (each byte once the server has been silent for 0.2 s)."""
    received, deadline = b"", time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk
        elif trickle:
            with suppress(OSError):  # closed by the server: the next read says so
                sock.sendall(trickle[:1])
            trickle = trickle[1:]
    raise AssertionError(f"the connection stayed open for {PATIENCE} s: {received[:200]!r}")


# What a read took past the response it was for: the start of the next, per connection.
_AHEAD: dict[int, bytes] = {}


def response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One whole response on a kept-alive connection: its head (lowercased) and body."""
    data = _AHEAD.pop(sock.fileno(), b"")
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    head = head.lower()
    length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    if body[length:]:
        _AHEAD[sock.fileno()] = body[length:]
    return head, body[:length]


def request(path: str, *headers: str, method: str = "GET", length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.timeout(240)
def test_headers_are_bounded_in_size(served: str) -> None:
    with connection(served) as sock:
        sock.sendall(request("/healthz", "X-Fill: " + "a" * 8000))
        head, _ = response(sock)
        assert head.startswith(b"http/1.1 200"), head
        big = request("/healthz", "X-Fill: " + "a" * 100_000)
        for at in range(0, len(big), 4096):  # stop sending once the server has answered
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(big[at : at + 4096])
            except OSError:
                break
        answer = answer_and_close(sock)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert b"HeadersTooLargeError" in answer or answer == b""


@pytest.mark.timeout(240)
def test_a_huge_header_sent_at_once_is_refused(served: str) -> None:
    with connection(served) as sock:
        sock.sendall(request("/healthz", *(f"X-F{n}: {'a' * 1000}" for n in range(40))))
        answer = answer_and_close(sock)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]


@pytest.mark.timeout(240)
def test_headers_that_never_end_are_cut_off(served: str) -> None:
    started = time.monotonic()
    with connection(served) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answer = answer_and_close(sock)
    assert answer.startswith(b"HTTP/1.1 408") and b"RequestTimeoutError" in answer, answer
    # not sooner than the bound (asyncio's timers may fire a clock tick early)
    assert time.monotonic() - started >= HEADER_SECONDS - 0.01
    with connection(served) as sock:  # trickled, a byte at a time: the bound is a deadline
        answer = answer_and_close(
            sock, trickle=b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 10_000
        )
    assert answer.startswith(b"HTTP/1.1 408"), answer
    with connection(served) as sock:  # never a byte: closed without a word
        assert answer_and_close(sock) == b""


@pytest.mark.timeout(240)
def test_a_slow_body_is_cut_off(served: str) -> None:
    key = "Authorization: Bearer key-alice"
    send = request(
        "/v1/message:send", key, "Content-Type: application/json", method="POST", length=500
    )
    with connection(served) as sock:
        sock.sendall(send + b'{"message": ')
        answer = answer_and_close(sock, trickle=b" " * 400)
    assert answer.startswith(b"HTTP/1.1 408") and b"RequestTimeoutError" in answer, answer
    # Unauthenticated: answered at once, and the rest of the body is not waited for either.
    anonymous = request(
        "/v1/message:send", "Content-Type: application/json", method="POST", length=500
    )
    with connection(served) as sock:
        sock.sendall(anonymous + b"{")
        answer = answer_and_close(sock, trickle=b" " * 400)
    assert answer.startswith(b"HTTP/1.1 401"), answer


class _Recorder:
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def test_a_response_head_goes_out_with_its_body_or_by_the_end_of_the_loops_turn() -> None:
    loop = asyncio.get_running_loop()
    whole = _Recorder()
    transport = _HeadWithBody(whole, loop)  # type: ignore[arg-type]
    for data in (b"head", b"body", b"more"):
        transport.write(data)
    assert whole.writes == [b"headbody", b"more"]  # one write for the head and the body

    streamed = _Recorder()
    transport = _HeadWithBody(streamed, loop)  # type: ignore[arg-type]
    transport.write(b"head")
    assert streamed.writes == []
    await asyncio.sleep(0)  # the end of this turn of the loop
    assert streamed.writes == [b"head"]  # a stream's head does not wait for its first event
    transport.write(b"event")
    assert streamed.writes == [b"head", b"event"]

    closed = _Recorder()
    transport = _HeadWithBody(closed, loop)  # type: ignore[arg-type]
    transport.write(b"head")
    transport.close()
    assert closed.writes == [b"head"] and closed.closed


@pytest.mark.timeout(240)
def test_bytes_past_the_declared_length_are_not_the_body(served: str) -> None:
    # The body limit trusts a Content-Length within it: the server hands the app no more
    # than the length declared, and what follows is read as the next request.
    body = orjson.dumps(
        {"message": {"role": "user", "parts": [{"text": "x"}], "messageId": "past-length"}}
    )
    key = "Authorization: Bearer key-carol"  # no other test here is hers
    send = request(
        "/v1/message:send", key, "Content-Type: application/json", method="POST", length=len(body)
    )
    with connection(served) as sock:
        sock.sendall(send + body + request("/v1/contexts", key))
        head, answer = response(sock)
        assert head.startswith(b"http/1.1 200"), head
        assert orjson.loads(answer)["task"]["status"]["state"] == "completed"
        head, answer = response(sock)
        assert head.startswith(b"http/1.1 200"), head
        assert len(orjson.loads(answer)["items"]) == 1


@pytest.mark.timeout(240)
def test_the_server_keeps_serving_and_names_no_software(served: str) -> None:
    with connection(served) as sock:
        for _ in range(2):  # keep-alive still works within the bounds
            sock.sendall(request("/v1/contexts", "Authorization: Bearer key-alice"))
            head, body = response(sock)
            assert head.startswith(b"http/1.1 200"), head
            assert orjson.loads(body)["items"] == []
            assert b"\r\nserver:" not in head
            assert b"cache-control: no-store" in head and b"x-content-type-options: nosniff" in head
