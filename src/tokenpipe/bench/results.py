"""What a run measured: each stream's times, a run's summary, and how both are printed."""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamResult:
    ttft: float = 0.0
    total: float = 0.0
    tokens: int = 0
    deltas: int = 0
    gaps: list[float] = field(default_factory=list)
    error: str | None = None
    started: float = 0.0
    last: float = 0.0

    def start(self) -> None:
        self.started = self.last = time.perf_counter()

    def arrived(self) -> None:
        """One piece of text: the first sets time to first token, the rest the gaps."""
        now = time.perf_counter()
        if self.ttft == 0.0:
            self.ttft = now - self.started
        else:
            self.gaps.append(now - self.last)
        self.last = now
        self.deltas += 1

    def stop(self) -> None:
        self.total = time.perf_counter() - self.started


@dataclass
class RunResult:
    label: str
    streams: list[StreamResult]
    wall: float
    server_cpu: float | None = None  # seconds of the server's CPU, where /metrics tells
    server_rss: float | None = None  # the server's resident memory after the run (bytes)

    def summary(self) -> dict[str, Any]:
        ok = [s for s in self.streams if s.error is None]
        ttfts = sorted(s.ttft for s in ok)
        gaps = sorted(g for s in ok for g in s.gaps)
        tokens = sum(s.tokens for s in ok)
        deltas = sum(s.deltas for s in ok)
        per_stream = [s.tokens / s.total for s in ok if s.total > 0]
        return {
            "label": self.label,
            "streams": len(self.streams),
            "errors": len(self.streams) - len(ok),
            "ttft_p50_ms": _pct(ttfts, 50) * 1000,
            "ttft_p99_ms": _pct(ttfts, 99) * 1000,
            "ttft_max_ms": (ttfts[-1] if ttfts else 0) * 1000,
            "itl_p50_ms": _pct(gaps, 50) * 1000,
            "itl_p99_ms": _pct(gaps, 99) * 1000,
            "aggregate_tok_s": tokens / self.wall if self.wall else 0.0,
            "per_stream_tok_s": statistics.mean(per_stream) if per_stream else 0.0,
            "tokens": tokens,
            "deltas_per_s": deltas / self.wall if self.wall else 0.0,
            "deltas": deltas,
            "server_cpu_s": self.server_cpu,
            "server_us_per_delta": (self.server_cpu / deltas * 1e6
                                    if self.server_cpu is not None and deltas else None),
            "server_rss_mb": self.server_rss / 1e6 if self.server_rss is not None else None,
        }


def _pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def print_run(result: RunResult, as_json: bool) -> None:
    s = result.summary()
    if as_json:
        print(json.dumps(s))
        return
    print(f"{s['label']:20s} n={s['streams']} err={s['errors']} "
          f"ttft p50 {s['ttft_p50_ms']:7.1f} p99 {s['ttft_p99_ms']:7.1f} ms | "
          f"itl p50 {s['itl_p50_ms']:6.2f} p99 {s['itl_p99_ms']:6.2f} ms | "
          f"aggregate {s['aggregate_tok_s']:7.1f} tok/s, per stream "
          f"{s['per_stream_tok_s']:6.1f} tok/s ({s['tokens']} tokens, "
          f"{s['deltas_per_s']:.0f} deltas/s)")
    rss = f"; RSS {s['server_rss_mb']:.0f} MB" if s["server_rss_mb"] is not None else ""
    if s["server_us_per_delta"] is not None:
        print(f"{'':20s} server CPU {s['server_cpu_s']:.2f} s: "
              f"{s['server_us_per_delta']:.1f} us per delta, "
              f"{s['server_cpu_s'] / s['tokens'] * 1e6 if s['tokens'] else 0:.1f} us per token"
              + rss)
    elif rss:
        print(f"{'':20s} server{rss[1:]}")


def print_medians(results: dict[str, list[RunResult]]) -> None:
    """Each target's medians, its tok/s as a ratio of the first target's and its time to
    first token as a difference from the first's (what issue 18 bounds: 5%, 2 ms)."""
    print("\nmedians over rounds:")
    base: tuple[float, float] | None = None
    for label, runs in results.items():
        agg = statistics.median(r.summary()["aggregate_tok_s"] for r in runs)
        ttft = statistics.median(r.summary()["ttft_p50_ms"] for r in runs)
        base = base or (agg, ttft)
        ratio = f"{agg / base[0]:5.2f}x" if base[0] else "  n/a"  # the first got nothing
        print(f"  {label:20s} aggregate {agg:8.1f} tok/s  ttft p50 {ttft:8.1f} ms"
              f"  ratio {ratio}  ttft {ttft - base[1]:+6.1f} ms")
