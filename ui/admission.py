"""Admission control at the HTTP edge: the per-caller rate limit of the question routes and the cap on
concurrent streamed answers. (The generation queue's bound and wait time-out are assistant/genqueue.py.)

`answer_unless_gone` runs a non-streamed answer and gives its queue ticket back the moment the client
disconnects (streams do the same in ui/streaming.py), so a request that left while waiting costs no prefill.

Every refusal is a UserError with `retry_after`, which the app's error handler (ui/server.py) answers with
its status (429 for the rate limit, 503 for the stream cap) and a `Retry-After` header.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from assistant.errors import UserError
from assistant.genqueue import Cancelled, Ticket

T = TypeVar("T")


class RateLimiter:
    """A token bucket per caller: `per_minute` requests a minute, bursts of up to `per_minute`; 0 is off.
    At most `max_callers` buckets are kept (the least recently seen go first)."""

    def __init__(self, per_minute: int, max_callers: int = 10_000) -> None:
        self.per_minute = per_minute
        self.max_callers = max_callers
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # caller -> (tokens, at)
        self._lock = threading.Lock()

    def check(self, caller: str) -> None:
        """Take one token for `caller`, or raise a 429 UserError saying when the next one is there."""
        if self.per_minute <= 0:
            return
        rate = self.per_minute / 60.0
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.pop(caller, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - at) * rate)
            allowed = tokens >= 1.0
            if allowed:
                tokens -= 1.0
            self._buckets[caller] = (tokens, now)
            while len(self._buckets) > self.max_callers:
                self._buckets.popitem(last=False)
        if not allowed:
            wait = max(1, math.ceil((1.0 - tokens) / rate))
            raise UserError("rate_limited", f"Too many requests (limit {self.per_minute} a minute); retry in "
                            f"{wait} s.", f"请求过于频繁（每分钟最多 {self.per_minute} 次），请 {wait} 秒后重试。",
                            429, retry_after=wait)


def caller_of(request: Request) -> str:
    """Who a request counts against: its key's owner id when keys are on, else its client IP."""
    owner = request.scope.get("state", {}).get("owner")
    if owner is not None:
        return "key:" + owner
    return "ip:" + (request.client.host if request.client else "unknown")


def rate_limit(request: Request) -> None:
    """Route dependency of the question routes (ask, search, advise, chat completions)."""
    request.app.state.rate_limiter.check(caller_of(request))


class StreamSlots:
    """At most `limit` streamed answers at once; a slot is held until the stream's producer thread ends,
    so this also bounds those threads."""

    def __init__(self, limit: int, retry_after_s: int) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.active = 0
        self._lock = threading.Lock()

    def acquire(self) -> Any:
        """Take a slot (a callable that gives it back, idempotent), or raise a 503 UserError."""
        with self._lock:
            if self.active >= self.limit:
                raise UserError("too_many_streams", f"Too many answers are streaming (max {self.limit}); "
                                "please retry in a moment.", f"同时进行的流式回答过多（最多 {self.limit} 个），请稍后重试。",
                                503, retry_after=self.retry_after_s)
            self.active += 1
        released = threading.Event()

        def release() -> None:
            with self._lock:
                if not released.is_set():
                    released.set()
                    self.active -= 1

        return release


async def answer_unless_gone(request: Request, service: Any, ticket: Ticket, call: Callable[[], T],
                             poll_s: float = 0.2) -> T | Response:
    """`call()` in the thread pool; while it runs, a client that disconnects gets its ticket given back at
    once (a request still waiting for the model then ends with `Cancelled`, never reaching it). Returns the
    call's result, or an empty 499 response nobody will read when the client left before its turn."""
    task = asyncio.ensure_future(run_in_threadpool(call))
    while not task.done():
        await asyncio.wait({task}, timeout=poll_s)
        if not task.done() and await request.is_disconnected():
            service.withdraw(ticket)  # a no-op once the turn has begun: that answer is finished and kept
            break
    try:
        return await task
    except Cancelled:
        return Response(status_code=499)
