"""Prometheus metrics for the HTTP layer: request counts and latency by route, time to sources and to the
first token, and the generation queue (length, total wait). One registry per app, so tests can build many."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import prometheus_client
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

prometheus_client.disable_created_metrics()  # no *_created series: less noise per scrape
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80)


class _QueueCollector:
    """Reads the service's generation queue at scrape time."""

    def __init__(self, service: Any) -> None:
        self.service = service

    def collect(self) -> Any:
        q = self.service.queue_stats()
        yield GaugeMetricFamily("assistant_generation_queue_waiting", "Requests waiting for the model", value=q["waiting"])
        yield CounterMetricFamily("assistant_generation_queue_wait_seconds", "Total seconds spent waiting for the model",
                                  value=q["total_wait_s"])
        yield CounterMetricFamily("assistant_generations", "Generations that got the model", value=q["served"])
        yield GaugeMetricFamily("assistant_ready", "1 when the index and model are loaded",
                                value=1.0 if self.service.ready() else 0.0)


class Metrics:
    def __init__(self, service: Any) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("assistant_http_requests", "HTTP requests", ["route", "method", "status"],
                                registry=self.registry)
        self.latency = Histogram("assistant_http_request_seconds", "HTTP request latency (whole stream for SSE)",
                                 ["route"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.ttft = Histogram("assistant_time_to_first_token_seconds", "Question received to first answer token",
                              buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.sources = Histogram("assistant_time_to_sources_seconds", "Question received to retrieved sources",
                                 buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(_QueueCollector(service))

    def observe_answer(self, timings: dict[str, float]) -> None:
        if timings.get("retrieval_ms") is not None:
            self.sources.observe(timings["retrieval_ms"] / 1000)
        if timings.get("ttft_ms"):  # a refusal's first token is its message, right after retrieval
            self.ttft.observe(timings["ttft_ms"] / 1000)

    def stream_observer(self, t0: float) -> Callable[[str], None]:
        """For streams: observe time to sources and to the first token as the events pass (even if the
        client leaves before the end). `t0` is perf_counter() when the request arrived."""
        seen: set[str] = set()

        def on_event(kind: str) -> None:
            if kind in seen or kind not in ("sources", "token"):
                return
            seen.add(kind)
            (self.sources if kind == "sources" else self.ttft).observe(time.perf_counter() - t0)

        return on_event

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Pure ASGI (safe with streaming): counts and times every /api, /v1 and health request by route template
    and method, both bounded (`bounded_labels`)."""

    PREFIXES = ("/api", "/v1", "/healthz", "/readyz", "/metrics")

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.PREFIXES):
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = {"code": 500}

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route, method = bounded_labels(scope)
            self.metrics.requests.labels(route, method, str(status["code"])).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - t0)


KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def bounded_labels(scope: Scope) -> tuple[str, str]:
    """(route, method) labels from a finished request: the matched route's template (one of the app's own,
    a finite set) and a known HTTP method; anything else is "other", so a client cannot grow the series."""
    route = scope.get("route")
    name = route.path if isinstance(route, Route) and route.path else "other"
    method = scope.get("method", "")
    return name, method if method in KNOWN_METHODS else "other"
