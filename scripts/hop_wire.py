#!/usr/bin/env python3
"""What one hop through tokenpipe adds to time to first token, read off the wire.

Capture a `tokenpipe bench --compare` run on the loopback interface, then read it here:

    tcpdump -i lo -s 1024 -B 32768 -w hop.pcap 'tcp port 8090 or tcp port 8091' &
    tokenpipe bench --api sse --url http://127.0.0.1:8091 \
        --compare http://127.0.0.1:8090 -n 8 --rounds 8 --warmup 1
    kill %1
    python scripts/hop_wire.py hop.pcap --proxy-port 8091 --upstream-port 8090 --skip 2

(8091: tokenpipe serve --engine openai --upstream http://127.0.0.1:8090; 8090: the
upstream, e.g. llama-server.) Through tokenpipe every stream is seen twice: client to
tokenpipe, and tokenpipe to the upstream. For each, time to first token is taken from the
kernel's packet timestamps: from the request's last byte to the first packet that carries
text. The hop's cost is the difference, stream by stream, which the upstream's own timing
(how it batches a burst of requests into decode steps) does not enter: the end-to-end
comparison of the bench's rounds does carry that, and at several streams it varies by
whole decode steps from round to round.

Rounds are told apart by time: the requests that start within --window seconds of a
round's first request are one round; a round with requests to the proxy port is a
proxied one, and all its requests to the upstream port are the hop's.
"""

from __future__ import annotations

import argparse
import re
import statistics
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

TEXT = re.compile(rb'"(?:content|text)":"(?!")')  # a chunk that carries text (not the role)
LINK_HEADER = {1: 14, 113: 16, 276: 20, 0: 4}  # Ethernet (lo), Linux cooked v1/v2, BSD null


@dataclass
class Stream:
    server_port: int
    started: float  # first request byte
    sent: float  # last request byte before the answer began
    first_text: float | None = None


@dataclass
class Round:
    streams: list[Stream] = field(default_factory=list)

    def proxied(self, proxy_port: int) -> bool:
        return any(s.server_port == proxy_port for s in self.streams)


def packets(path: str) -> Iterator[tuple[float, int, int, bytes]]:
    """(time, source port, destination port, payload) of each TCP packet with a payload."""
    with open(path, "rb") as f:
        head = f.read(24)
        magic = head[:4]
        order = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",
                 b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}.get(magic)
        if order is None:
            raise SystemExit(f"{path}: not a pcap file (pcapng is not read here)")
        nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
        link = struct.unpack(order + "I", head[20:24])[0]
        if link not in LINK_HEADER:
            raise SystemExit(f"{path}: link type {link} is not read here")
        skip = LINK_HEADER[link]
        while len(record := f.read(16)) == 16:
            sec, frac, caught, _ = struct.unpack(order + "IIII", record)
            frame = f.read(caught)
            stamp = sec + frac / (1e9 if nano else 1e6)
            ip = frame[skip:]
            if not ip:
                continue
            if ip[0] >> 4 == 4 and ip[9] == 6:
                tcp = ip[(ip[0] & 15) * 4:]
            elif ip[0] >> 4 == 6 and ip[6] == 6:
                tcp = ip[40:]
            else:
                continue
            if len(tcp) < 20:
                continue
            sport, dport = struct.unpack("!HH", tcp[:4])
            payload = tcp[(tcp[12] >> 4) * 4:]
            if payload:
                yield stamp, sport, dport, payload


def read_rounds(path: str, ports: tuple[int, int], window: float) -> list[Round]:
    streams: dict[tuple[int, int], Stream] = {}  # (client port, server port): latest request
    ordered: list[Stream] = []
    for stamp, sport, dport, payload in packets(path):
        if dport in ports:
            stream = streams.get((sport, dport))
            if payload.startswith(b"POST "):
                stream = Stream(dport, stamp, stamp)
                streams[(sport, dport)] = stream
                ordered.append(stream)
            elif stream is not None and stream.first_text is None:
                stream.sent = stamp  # the body after the head (httpx writes them apart)
        elif sport in ports:
            stream = streams.get((dport, sport))
            if stream is not None and stream.first_text is None and TEXT.search(payload):
                stream.first_text = stamp
    rounds: list[Round] = []
    for stream in sorted(ordered, key=lambda s: s.started):
        if not rounds or stream.started - rounds[-1].streams[0].started > window:
            rounds.append(Round())
        rounds[-1].streams.append(stream)
    return rounds


def _first(stream: Stream) -> float:
    assert stream.first_text is not None
    return stream.first_text


def _ttft(streams: list[Stream]) -> float:
    return statistics.mean(_first(s) - s.sent for s in streams)


def report(rounds: list[Round], proxy_port: int, upstream_port: int) -> dict[str, float]:
    """Prints one line per round and the summary; returns the summary (milliseconds)."""
    added: list[float] = []
    via: list[float] = []
    direct: list[float] = []
    inward: list[float] = []
    outward: list[float] = []
    for i, r in enumerate(rounds):
        done = [s for s in r.streams if s.first_text is not None]
        mine = [s for s in done if s.server_port == proxy_port]
        upstream = [s for s in done if s.server_port == upstream_port]
        if r.proxied(proxy_port):
            if not mine or len(mine) != len(upstream):
                print(f"round {i:3d} proxied: {len(mine)} client and {len(upstream)} upstream "
                      "streams with text: not comparable, left out")
                continue
            cost = _ttft(mine) - _ttft(upstream)
            # means of arrival and departure times, so no pairing of streams is needed
            into = (statistics.mean(s.sent for s in upstream)
                    - statistics.mean(s.sent for s in mine))
            out = (statistics.mean(_first(s) for s in mine)
                   - statistics.mean(_first(s) for s in upstream))
            added.append(cost)
            via.append(_ttft(mine))
            inward.append(into)
            outward.append(out)
            print(f"round {i:3d} proxied n={len(mine)}: ttft client {_ttft(mine) * 1e3:8.2f} "
                  f"upstream {_ttft(upstream) * 1e3:8.2f} ms, hop adds {cost * 1e3:6.3f} ms "
                  f"(request in {into * 1e3:6.3f}, first text out {out * 1e3:6.3f})")
        elif upstream:
            direct.append(_ttft(upstream))
            print(f"round {i:3d} direct  n={len(upstream)}: ttft {_ttft(upstream) * 1e3:8.2f} ms")
    summary: dict[str, float] = {}
    if added:
        summary.update(rounds=float(len(added)), added_mean_ms=statistics.mean(added) * 1e3,
                       added_max_ms=max(added) * 1e3, in_mean_ms=statistics.mean(inward) * 1e3,
                       out_mean_ms=statistics.mean(outward) * 1e3,
                       proxied_ttft_mean_ms=statistics.mean(via) * 1e3)
        print(f"hop over {len(added)} rounds: adds {summary['added_mean_ms']:.3f} ms mean "
              f"(worst round {summary['added_max_ms']:.3f}) to time to first token: request "
              f"in {summary['in_mean_ms']:.3f}, first text out {summary['out_mean_ms']:.3f}")
    if direct:
        summary["direct_ttft_mean_ms"] = statistics.mean(direct) * 1e3
    if added and direct:
        print(f"end to end, mean of rounds: through tokenpipe {summary['proxied_ttft_mean_ms']:.2f}"
              f" ms, direct {summary['direct_ttft_mean_ms']:.2f} ms (the upstream's batching "
              "varies between rounds)")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pcap")
    p.add_argument("--proxy-port", type=int, required=True)
    p.add_argument("--upstream-port", type=int, required=True)
    p.add_argument("--skip", type=int, default=0, help="leading rounds to leave out (warm-up)")
    p.add_argument("--window", type=float, default=0.5,
                   help="seconds from a round's first request within which requests belong to it")
    args = p.parse_args(argv)
    rounds = read_rounds(args.pcap, (args.proxy_port, args.upstream_port), args.window)
    summary = report(rounds[args.skip:], args.proxy_port, args.upstream_port)
    return 0 if summary else 1


if __name__ == "__main__":
    sys.exit(main())
