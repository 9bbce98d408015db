"""Unit tests of the handshake and HTTP policy: Origin, Host, connection caps, refusals."""

from __future__ import annotations

import asyncio
import errno
import json
import logging

import pytest

from tokenpipe.config import Settings
from tokenpipe.server.connection_caps import (
    MAX_BACKLOG,
    MIN_RESERVE,
    ConnectionCaps,
    throttle_accept_errors,
)
from tokenpipe.server.http_limits import HttpLimits, error_body, refusal
from tokenpipe.server.log_throttle import ThrottledLog
from tokenpipe.server.security import HostPolicy, host_name, is_loopback, origin_allowed

LOOPBACK_BOUND = HostPolicy.of("127.0.0.1", ())
HOST = "127.0.0.1:8000"

HOSTILE_ORIGINS = [
    "http://127.0.0.1.evil.com", "http://127.evil.com", "http://127.0.0.1.nip.io",
    "https://127.0.0.1.evil.com:8000", "http://localhost.evil.com", "http://evil.com",
    "http://evil-localhost", "http://localhost@evil.com", "http://0x7f.evil.com",
    "http://[::1].evil.com", "http://::1", "http://[::1", "null", "", "file://",
    "http://127.1", "http://2130706433", "http://[::ffff:7f00:1]:8000", "ws://evil.com",
    "http://evil.com:8000", "http://127.0.0.1:8000.evil.com",
]
LOOPBACK_ORIGINS = [
    "http://127.0.0.1:3000", "http://127.0.0.1", "https://127.0.0.1:8443", "http://127.1.2.3:80",
    "http://localhost:5173", "http://LOCALHOST", "http://[::1]:8000", "http://[::1]",
]


@pytest.mark.parametrize("origin", HOSTILE_ORIGINS)
def test_hostile_origins_are_refused(origin: str) -> None:
    assert not origin_allowed(origin, HOST, (), LOOPBACK_BOUND)


@pytest.mark.parametrize("origin", LOOPBACK_ORIGINS)
def test_loopback_origins_are_allowed(origin: str) -> None:
    assert origin_allowed(origin, HOST, (), LOOPBACK_BOUND)


def test_listed_origins_and_the_wildcard() -> None:
    assert origin_allowed("https://chat.example.com", HOST, ("https://chat.example.com",),
                          LOOPBACK_BOUND)
    assert not origin_allowed("https://chat.example.com.evil.com", HOST,
                              ("https://chat.example.com",), LOOPBACK_BOUND)
    assert origin_allowed("http://evil.com", HOST, ("*",), LOOPBACK_BOUND)


def test_origin_equal_to_host_needs_an_allowed_host() -> None:
    """DNS rebinding: the page's origin equals the Host it sent; only allowed hosts count."""
    assert not origin_allowed("http://evil.com:8000", "evil.com:8000", (), LOOPBACK_BOUND)
    listed = HostPolicy.of("127.0.0.1", ("chat.lan",))
    assert origin_allowed("http://chat.lan:8000", "chat.lan:8000", (), listed)
    assert not origin_allowed("http://chat.lan:9000", "chat.lan:8000", (), listed)
    lan = HostPolicy.of("0.0.0.0", ())  # a LAN server answers every Host by default
    assert origin_allowed("http://192.168.1.5:8000", "192.168.1.5:8000", (), lan)
    assert not origin_allowed("http://192.168.1.5:8000", None, (), lan)


@pytest.mark.parametrize(("authority", "name"), [
    ("localhost", "localhost"), ("LocalHost:8000", "localhost"), ("127.0.0.1:8000", "127.0.0.1"),
    ("[::1]:8000", "::1"), ("[::1]", "::1"), ("example.com:", "example.com"),
    ("::1", None), ("[::1", None), ("[::1]x", None), ("a:b:c", None), ("host:80x", None),
    ("[127.0.0.1]", None), ("", None), (":80", None), ("host:８０", None),
])
def test_host_name(authority: str, name: str | None) -> None:
    assert host_name(authority) == name


@pytest.mark.parametrize(("name", "loopback"), [
    ("localhost", True), ("127.0.0.1", True), ("127.255.0.9", True), ("::1", True),
    ("127.0.0.1.evil.com", False), ("127.evil.com", False), ("127.1", False),
    ("localhost.", False), ("0.0.0.0", False), ("10.0.0.1", False), ("", False),
])
def test_is_loopback_parses_rather_than_matches_a_prefix(name: str, loopback: bool) -> None:
    assert is_loopback(name) is loopback


@pytest.mark.parametrize("bind", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_a_loopback_bound_server_answers_loopback_hosts_only(bind: str) -> None:
    policy = HostPolicy.of(bind, ())
    for host in ("localhost", "localhost:8000", "127.0.0.1:8000", "127.3.2.1", "[::1]:8000"):
        assert policy.allows(host), host
    for host in ("evil.com", "evil.com:8000", "127.0.0.1.evil.com", "localhost.evil.com:8000",
                 "192.168.1.5:8000", "[::1", "a:b:c", ""):
        assert not policy.allows(host), host
    assert policy.allows(None)  # no Host at all is no browser, so no rebinding


def test_allowed_hosts_add_names_any_port() -> None:
    policy = HostPolicy.of("127.0.0.1", ("chat.example.com", "[fe80::1]:8000", "LAN.local"))
    for host in ("chat.example.com", "chat.example.com:443", "[fe80::1]:9", "lan.local",
                 "localhost:8000"):
        assert policy.allows(host), host
    assert not policy.allows("evil.chat.example.com")
    assert HostPolicy.of("127.0.0.1", ("*",)).allows("anything.example")


def test_a_non_loopback_server_follows_allowed_hosts() -> None:
    assert HostPolicy.of("0.0.0.0", ()).allows("evil.com")  # a LAN server, documented
    assert HostPolicy.of("", ()).allows("whatever:1")
    listed = HostPolicy.of("0.0.0.0", ("gpu1.lan",))
    assert listed.allows("gpu1.lan:8000") and listed.allows("127.0.0.1:8000")
    assert not listed.allows("evil.com")


def test_connection_caps_fit_the_fd_limit_and_no_client_takes_more_than_half() -> None:
    caps = ConnectionCaps.of(Settings(), fd_limit=20000, in_use=30)
    assert (caps.total, caps.per_client, caps.backlog) == (4096, 512, MAX_BACKLOG)
    assert ConnectionCaps.of(Settings(), fd_limit=4096, in_use=30).backlog == (1024 - 30) // 5
    low = ConnectionCaps.of(Settings(), fd_limit=256, in_use=20)
    assert low.total == 256 - MIN_RESERVE and low.per_client == low.total // 2
    assert low.total + 20 + 5 * low.backlog < 256
    assert ConnectionCaps.of(Settings(max_tcp_connections=10), fd_limit=20000).total == 10
    unlimited = ConnectionCaps.of(Settings(max_tcp_connections_per_client=0), fd_limit=20000)
    assert unlimited.per_client == 0


def test_connection_caps_count_per_client_and_in_all() -> None:
    caps = ConnectionCaps(total=3, per_client=2)
    assert caps.admit("a") is None and caps.admit("a") is None
    assert "per client address" in (caps.admit("a") or "")
    assert caps.admit("b") is None
    assert "open connections" in (caps.admit("c") or "")
    caps.release("a")
    assert caps.admit("c") is None
    for client in ("a", "b", "c"):
        caps.release(client)
    assert caps.open == 0 and caps.by_client == {}


def test_limits_default_to_the_websocket_frame_limit() -> None:
    assert HttpLimits.of(Settings()).max_body_bytes == Settings().max_message_bytes
    assert HttpLimits.of(Settings(max_message_bytes=10)).max_body_bytes == 10
    assert HttpLimits.of(Settings(max_body_bytes=5, max_message_bytes=10)).max_body_bytes == 5


def test_refusals_take_the_route_error_shape() -> None:
    openai = json.loads(error_body(413, "too big", b"/v1/chat/completions"))
    assert openai == {"error": {"message": "too big", "type": "invalid_request_error",
                                "param": None, "code": None}}
    assert json.loads(error_body(421, "no", b"/ws"))["error"]["type"] == "permission_error"
    assert json.loads(error_body(503, "busy", b""))["error"]["type"] == "server_error"
    assert json.loads(error_body(413, "too big", b"/health")) == {"detail": "too big"}
    raw = refusal(431, "head too big", b"/x", [(b"server", b"t")], retry_after_s=2)
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"connection: close" in lines and b"retry-after: 2" in lines
    assert b"server: t" in lines and b"content-length: %d" % len(body) in lines


def test_throttled_log_says_how_many_it_stood_for(caplog: pytest.LogCaptureFixture) -> None:
    throttled = ThrottledLog(logging.getLogger("t"), interval_s=3600)
    with caplog.at_level(logging.WARNING, "t"):
        for i in range(5):
            throttled.warning("accept", "failed %d", i)
        throttled.warning("other", "another kind")
    assert [r.getMessage() for r in caplog.records] == ["failed 0", "another kind"]
    throttled.interval_s = 0
    with caplog.at_level(logging.WARNING, "t"):
        throttled.warning("accept", "failed %d", 9)
    assert caplog.records[-1].getMessage().startswith("failed 9 (and 4 more since the last")


def test_failed_accepts_log_one_line_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    """What asyncio reports for each failed accept() (CPython 3.11 retries a whole backlog
    of them a second when descriptors run out) becomes one line, other errors pass on."""
    loop = asyncio.new_event_loop()
    try:
        throttle_accept_errors(loop, interval_s=3600)
        with caplog.at_level(logging.WARNING, "asyncio"):
            for _ in range(2048):
                loop.call_exception_handler({
                    "message": "socket.accept() out of system resource",
                    "exception": OSError(errno.EMFILE, "Too many open files")})
            loop.call_exception_handler({"message": "something else"})
    finally:
        loop.close()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert "Too many open files" in messages[0] and messages[1] == "something else"
