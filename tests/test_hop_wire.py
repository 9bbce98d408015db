"""scripts/hop_wire.py: the hop's cost read from a packet capture (a written pcap here)."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "hop_wire.py"
spec = importlib.util.spec_from_file_location("hop_wire", SCRIPT)
assert spec is not None and spec.loader is not None
hop_wire = importlib.util.module_from_spec(spec)
sys.modules["hop_wire"] = hop_wire  # dataclasses look their module up
spec.loader.exec_module(hop_wire)

PROXY, UPSTREAM = 8091, 8090
ROLE = b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
TEXT = b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'


def _frame(sport: int, dport: int, payload: bytes) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 5 << 4, 0x18, 65535, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(payload), 0, 0, 64, 6, 0,
                     b"\x7f\0\0\x01", b"\x7f\0\0\x01")
    ethernet = b"\0" * 12 + b"\x08\x00"
    return ethernet + ip + tcp + payload


def _pcap(path: Path, packets: list[tuple[float, int, int, bytes]], nano: bool = False) -> None:
    magic = 0xa1b23c4d if nano else 0xa1b2c3d4
    out = [struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 65535, 1)]
    for stamp, sport, dport, payload in packets:
        frame = _frame(sport, dport, payload)
        sec = int(stamp)
        frac = round((stamp - sec) * (1e9 if nano else 1e6))
        out.append(struct.pack("<IIII", sec, frac, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))


def _capture() -> list[tuple[float, int, int, bytes]]:
    post = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n"
    return [
        # a proxied round of two streams: client -> tokenpipe (head, then body) ...
        (10.0000, 50001, PROXY, post), (10.0005, 50001, PROXY, b"{}"),
        (10.0001, 50002, PROXY, post), (10.0005, 50002, PROXY, b"{}"),
        (10.0010, 40009, UPSTREAM, b"GET /health HTTP/1.1\r\n\r\n"),  # not a request
        # ... tokenpipe -> upstream, one write each
        (10.0020, 40001, UPSTREAM, post + b"{}"), (10.0030, 40002, UPSTREAM, post + b"{}"),
        (10.0100, UPSTREAM, 40001, b"HTTP/1.1 200 OK\r\n\r\n" + ROLE),  # no text yet
        (10.0500, UPSTREAM, 40001, TEXT), (10.0510, UPSTREAM, 40002, TEXT),
        (10.0520, PROXY, 50001, TEXT), (10.0540, PROXY, 50002, TEXT),
        (10.0600, PROXY, 50001, TEXT),  # later text does not count
        (11.0000, 9999, 22, b"POST elsewhere"),  # another port
        # a direct round
        (12.0000, 50003, UPSTREAM, post + b"{}"), (12.0300, UPSTREAM, 50003, TEXT),
    ]


@pytest.mark.parametrize("nano", [False, True])
def test_hop_cost_from_a_capture(tmp_path: Path, nano: bool, capsys: pytest.CaptureFixture[str]
                                 ) -> None:
    path = tmp_path / "hop.pcap"
    _pcap(path, _capture(), nano=nano)
    rounds = hop_wire.read_rounds(str(path), (PROXY, UPSTREAM), 0.5)
    assert [len(r.streams) for r in rounds] == [4, 1]
    summary = hop_wire.report(rounds, PROXY, UPSTREAM)
    # client ttft from the body's last byte: 51.5 and 53.5 ms; upstream: 48 and 48 ms
    assert summary["added_mean_ms"] == pytest.approx(4.5, abs=1e-3)
    assert summary["in_mean_ms"] == pytest.approx(2.0, abs=1e-3)
    assert summary["out_mean_ms"] == pytest.approx(2.5, abs=1e-3)
    assert summary["proxied_ttft_mean_ms"] == pytest.approx(52.5, abs=1e-3)
    assert summary["direct_ttft_mean_ms"] == pytest.approx(30.0, abs=1e-3)
    assert "hop over 1 rounds: adds 4.500 ms mean" in capsys.readouterr().out


def test_command_line_and_skip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hop.pcap"
    _pcap(path, _capture())
    args = [str(path), "--proxy-port", str(PROXY), "--upstream-port", str(UPSTREAM)]
    assert hop_wire.main(args) == 0
    assert hop_wire.main([*args, "--skip", "2"]) == 1  # nothing left to compare
    (tmp_path / "not.pcap").write_bytes(b"\n" * 24)
    with pytest.raises(SystemExit, match="not a pcap"):
        hop_wire.main([str(tmp_path / "not.pcap"), *args[1:]])
    capsys.readouterr()


def test_a_proxied_round_missing_its_upstream_side_is_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hop.pcap"
    kept = [p for p in _capture() if UPSTREAM not in (p[1], p[2]) or p[0] >= 12]
    _pcap(path, kept)
    summary = hop_wire.report(hop_wire.read_rounds(str(path), (PROXY, UPSTREAM), 0.5),
                              PROXY, UPSTREAM)
    assert "added_mean_ms" not in summary
    assert "not comparable, left out" in capsys.readouterr().out
