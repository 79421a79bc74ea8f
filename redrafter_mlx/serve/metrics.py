"""What an operator sees: Prometheus metrics at `GET /metrics` and one JSON access-log line
per request (logger `redrafter.access`).

Each app has its own registry (several servers may live in one process, as in the tests).
Tokens, requests and acceptance are counters, so rates and mean accepted lengths come out
of PromQL (`rate(redrafter_accepted_drafts_total[1m]) / rate(redrafter_row_steps_total[1m])`);
time to first token and request latency are histograms; queue length and batch size are
read from the engine when scraped.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..decoding import GenerationStats
from .replies import acceptance

ACCESS_LOG = logging.getLogger("redrafter.access")
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    """The server's counters, histograms and gauges, in its own registry."""

    def __init__(self, queued: Callable[[], int], running: Callable[[], int]):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("redrafter_requests", "Requests answered", ["endpoint", "finish_reason"], registry=r)
        self.prompt_tokens = Counter("redrafter_prompt_tokens", "Prompt tokens", registry=r)
        self.cached_tokens = Counter(
            "redrafter_cached_prompt_tokens", "Prompt tokens from the prompt cache", registry=r
        )
        self.completion_tokens = Counter("redrafter_completion_tokens", "Tokens generated", registry=r)
        self.row_steps = Counter("redrafter_row_steps", "Verify steps, counted per row", registry=r)
        self.drafted = Counter("redrafter_drafted_tokens", "Drafted tokens verified", registry=r)
        self.accepted = Counter("redrafter_accepted_drafts", "Drafted tokens accepted", registry=r)
        self.ttft = Histogram(
            "redrafter_time_to_first_token_seconds", "Arrival to first token", buckets=LATENCY_BUCKETS, registry=r
        )
        self.latency = Histogram(
            "redrafter_request_latency_seconds", "Arrival to last token", buckets=LATENCY_BUCKETS, registry=r
        )
        Gauge("redrafter_queue_length", "Requests waiting for a row", registry=r).set_function(queued)
        Gauge("redrafter_batch_size", "Requests decoding or joining", registry=r).set_function(running)

    def record(
        self, endpoint: str, status: int, finish: str, stats: GenerationStats, started: float, first: float | None
    ):
        """Count one finished request and write its access-log line."""
        now = time.perf_counter()
        figures = acceptance(stats)
        self.requests.labels(endpoint, finish).inc()
        self.prompt_tokens.inc(stats.prompt_tokens)
        self.cached_tokens.inc(stats.cached_tokens)
        self.completion_tokens.inc(stats.num_tokens)
        self.row_steps.inc(stats.steps)
        self.drafted.inc(figures["drafted"])
        self.accepted.inc(figures["accepted"])
        if first is not None:
            self.ttft.observe(first - started)
        self.latency.observe(now - started)
        line = {
            "endpoint": endpoint,
            "status": status,
            "finish_reason": finish,
            "prompt_tokens": stats.prompt_tokens,
            "cached_tokens": stats.cached_tokens,
            "completion_tokens": stats.num_tokens,
            "ttft_s": None if first is None else round(first - started, 4),
            "latency_s": round(now - started, 4),
            "tokens_per_step": figures["tokens_per_step"],
        }
        ACCESS_LOG.info(json.dumps(line))
