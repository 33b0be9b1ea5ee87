"""A first-come-first-served queue in front of the one loaded model.

A request takes its ticket when it arrives (`reserve`), before retrieval, so that the order in which
requests get the model is the order in which they arrived, not the order in which their retrievals
happened to finish. A request that turns out not to need the model (a refusal, a client that went
away) gives its ticket back (`cancel`) and the line moves on. The line is bounded: a request that would
wait behind more than `max_waiting` others gets a clear 503, not an ever-growing wait. Search and passage
requests never pass through here.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .errors import UserError


@dataclass
class Ticket:
    number: int
    arrived: float = field(default_factory=time.perf_counter)


def _queue_full() -> UserError:
    return UserError("queue_full", "The assistant is busy (queue full); please retry in a moment.",
                     "助手正忙（排队已满），请稍后重试。", status=503)


class GenerationQueue:
    def __init__(self, max_waiting: int = 16) -> None:
        self.max_waiting = max_waiting
        self._cond = threading.Condition()
        self._numbers = itertools.count()
        self._line: deque[int] = deque()  # ticket numbers in arrival order; the head holds the model
        self._serving: int | None = None
        self.total_wait_s = 0.0
        self.served = 0
        self.last_wait_s = 0.0

    @property
    def waiting(self) -> int:
        """Requests in line that do not hold the model yet."""
        with self._cond:
            return len(self._line) - (1 if self._serving is not None else 0)

    def reserve(self) -> Ticket:
        """Take a place in line now (at arrival)."""
        with self._cond:
            ticket = Ticket(next(self._numbers))
            self._line.append(ticket.number)
            return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Give a place back without using the model (idempotent)."""
        with self._cond:
            if ticket.number in self._line and ticket.number != self._serving:
                self._line.remove(ticket.number)
                self._cond.notify_all()

    @contextmanager
    def turn(self, ticket: Ticket | None = None) -> Iterator[float]:
        """Hold the model for one generation; yields the seconds waited since the ticket was taken."""
        ticket = ticket or self.reserve()
        with self._cond:
            if ticket.number not in self._line:
                raise RuntimeError("ticket already used or cancelled")
            ahead = self._line.index(ticket.number) - (1 if self._serving is not None else 0)
            if ahead >= self.max_waiting:
                self._line.remove(ticket.number)
                self._cond.notify_all()
                raise _queue_full()
            while self._line[0] != ticket.number:
                self._cond.wait()
            self._serving = ticket.number
            waited = time.perf_counter() - ticket.arrived
            self.total_wait_s += waited
            self.last_wait_s = waited
        try:
            yield waited
        finally:
            with self._cond:
                self._line.popleft()
                self._serving = None
                self.served += 1
                self._cond.notify_all()
