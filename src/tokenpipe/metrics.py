"""Prometheus metrics, one registry per server (several apps can live in one process)."""

from __future__ import annotations

import asyncio
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

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
                              "From request to first text, queue time included",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("tokenpipe_inter_token_latency_seconds",
                             "Time between consecutive pieces of text of one generation",
                             buckets=TOKEN_GAP_BUCKETS, registry=r)
        self.tokens = Counter("tokenpipe_tokens_generated",
                              "Completion tokens generated", registry=r)
        self.prompt_tokens = Counter("tokenpipe_prompt_tokens",
                                     "Prompt tokens of admitted generations", registry=r)
        self.finished = Counter("tokenpipe_generations_finished",
                                "Generations that ended with an end frame, by finish_reason",
                                ["finish_reason"], registry=r)
        self.cancellations = Counter("tokenpipe_cancellations",
                                     "Generations cancelled (by cancel, disconnect or expiry)",
                                     registry=r)
        self.errors = Counter("tokenpipe_errors", "Errors sent to clients, by code", ["code"],
                              registry=r)
        self.connections = Gauge("tokenpipe_connections", "Open connections, by protocol",
                                 ["protocol"], registry=r)
        # For soak tests and leak hunting: these must come back to their idle values.
        ProcessCollector(registry=r)  # process_resident_memory_bytes, open fds, ...
        Gauge("tokenpipe_threads", "Threads in the server process",
              registry=r).set_function(threading.active_count)
        Gauge("tokenpipe_asyncio_tasks", "Tasks on the server's event loop",
              registry=r).set_function(_task_count)


def _task_count() -> int:
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:  # scraped outside the event loop
        return 0
