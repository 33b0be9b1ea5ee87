"""A first-come-first-served queue in front of the one loaded model.

Generation requests take a ticket and wait their turn; the queue is bounded (a full queue is a
clear 503, not an ever-growing wait). Search and passage requests never pass through here.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import UserError


class GenerationQueue:
    def __init__(self, max_waiting: int = 16) -> None:
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._tickets = itertools.count()
        self._serving = 0
        self._next = 0
        self.waiting = 0
        self.total_wait_s = 0.0
        self.served = 0
        self.last_wait_s = 0.0

    @contextmanager
    def turn(self) -> Iterator[float]:
        """Hold the model for one generation; yields the seconds spent waiting."""
        with self._cond:
            if self.waiting >= self.max_waiting:
                raise UserError("queue_full", "The assistant is busy (queue full); please retry in a moment.",
                                "助手正忙（排队已满），请稍后重试。", status=503)
            ticket = next(self._tickets)
            self.waiting += 1
            t0 = time.perf_counter()
            while ticket != self._next:
                self._cond.wait()
            self.waiting -= 1
            waited = time.perf_counter() - t0
            self.total_wait_s += waited
            self.last_wait_s = waited
        try:
            yield waited
        finally:
            with self._cond:
                self._next += 1
                self.served += 1
                self._cond.notify_all()
