"""Prometheus metrics, one registry per server (several apps can live in one process).
Every metric of requests and their streams carries `api`, the door the request came in by:
one of the door table's labels (server/doors.py; docs/configuration.md lists them)."""

from __future__ import annotations

import asyncio
import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TOKEN_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.active = Gauge("tokenpipe_generations_active",
                            "Generations running on the engine", ["model"], registry=r)
        self.queued = Gauge("tokenpipe_generations_queued",
                            "Generations waiting for a place on the engine", ["model"],
                            registry=r)
        self.ttft = Histogram("tokenpipe_time_to_first_token_seconds",
                              "From request to first text, queue time included, by API",
                              ["api"], buckets=LATENCY_BUCKETS, registry=r)
        self.itl = LoopHistogram("tokenpipe_inter_token_latency_seconds",
                                 "Time between consecutive pieces of text of one generation, "
                                 "by API", TOKEN_GAP_BUCKETS, r)
        self.tokens = Counter("tokenpipe_tokens_generated",
                              "Completion tokens generated, by API", ["api"], registry=r)
        self.drafted = Counter("tokenpipe_draft_tokens",
                               "Tokens drafted by speculative decoding, by API", ["api"],
                               registry=r)
        self.accepted = Counter("tokenpipe_draft_tokens_accepted",
                                "Drafted tokens the answers took, by API", ["api"],
                                registry=r)
        self.prompt_tokens = Counter("tokenpipe_prompt_tokens",
                                     "Prompt tokens of admitted generations, by API", ["api"],
                                     registry=r)
        self.finished = Counter("tokenpipe_generations_finished",
                                "Generations that ended with an end frame, by finish_reason "
                                "and API", ["finish_reason", "api"], registry=r)
        self.cancellations = Counter("tokenpipe_cancellations",
                                     "Generations cancelled (by cancel, disconnect or expiry), "
                                     "by API", ["api"], registry=r)
        self.errors = Counter("tokenpipe_errors", "Errors sent to clients, by code and API",
                              ["code", "api"], registry=r)
        self.connections = Gauge("tokenpipe_connections", "Open connections, by protocol",
                                 ["protocol"], registry=r)
        self.engines = EngineCounters(r)
        # For soak tests and leak hunting: these must come back to their idle values.
        ProcessCollector(registry=r)  # process_resident_memory_bytes, open fds, ...
        Gauge("tokenpipe_threads", "Threads in the server process",
              registry=r).set_function(threading.active_count)
        Gauge("tokenpipe_asyncio_tasks", "Tasks on the server's event loop",
              registry=r).set_function(_task_count)


    def add_state(self, store: Any) -> None:
        """The shared state store's metrics (`--state`): whether Redis is in use, how often
        it became unreachable, how many streams this replica took over from a stopped one."""
        r = self.registry
        Gauge("tokenpipe_state_up", "1 while the state store (Redis) is in use, 0 while it "
              "is unreachable", registry=r).set_function(lambda: store.failure is None)
        store.outages = Counter("tokenpipe_state_outages",
                                "Times the state store became unreachable", registry=r)
        store.takeovers = Counter("tokenpipe_state_takeovers",
                                  "Streams taken over from a stopped replica", registry=r)


class LoopHistogram:
    """A histogram observed once per token on the event loop: a bisect and two additions,
    no lock (prometheus_client's Histogram takes a lock and a counter object per bucket,
    several microseconds a token). Only the loop's thread observes or collects it. One
    series per `api`: a generation takes its child once (`labels(api)`), then observes."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = tuple(buckets)
        self.children: dict[str, LoopSeries] = {}
        registry.register(self)

    def labels(self, api: str) -> LoopSeries:
        child = self.children.get(api)
        if child is None:
            child = self.children[api] = LoopSeries(self.bounds)
        return child

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=["api"])
        for api, child in self.children.items():
            cumulative, total = [], 0
            for bound, count in zip((*map(str, self.bounds), "+Inf"), child.counts,
                                    strict=True):
                total += count
                cumulative.append((bound, total))
            family.add_metric([api], cumulative, child.sum)
        yield family


class LoopSeries:
    """One label's series of a LoopHistogram."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le: value <= bound
        self.sum += value


class EngineCounters:
    """Faults of each model's engine and its recoveries, read from the engines themselves
    (`failures`, `restarts`): they happen in engine threads, counted where they happen."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.engines: dict[str, Any] = {}  # model -> engine
        registry.register(self)

    def watch(self, model: str, engine: Any) -> None:
        self.engines[model] = engine

    def collect(self) -> Iterator[Metric]:
        failures = CounterMetricFamily(
            "tokenpipe_engine_failures", "Faults of an engine's loop that ended the "
            "generations it was running", labels=["model"])
        restarts = CounterMetricFamily(
            "tokenpipe_engine_restarts", "Times an engine recovered from a fault by itself "
            "(a fresh context and loop, the model kept loaded)", labels=["model"])
        shared = CounterMetricFamily(
            "tokenpipe_prompt_tokens_shared", "Prompt tokens copied from another running "
            "sequence (llama.cpp: a shared prefix, the choices of a request with n), not "
            "decoded again", labels=["model"])
        for model, engine in self.engines.items():
            failures.add_metric([model], getattr(engine, "failures", 0))
            restarts.add_metric([model], getattr(engine, "restarts", 0))
            shared.add_metric([model], getattr(engine, "shared_prefix_tokens", 0))
        yield failures
        yield restarts
        yield shared


def _task_count() -> int:
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # scraped outside the event loop
        return 0
