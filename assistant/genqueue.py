"""A first-come-first-served queue in front of the one loaded model.

A request takes its ticket when it arrives (`reserve`), before retrieval, so that the order in which
requests get the model is the order in which they arrived, not the order in which their retrievals
happened to finish. A request that turns out not to need the model (a refusal, a client that went
away) gives its ticket back (`cancel`) and the line moves on; a request still waiting for its turn when its
ticket is cancelled (its client left) wakes at once with `Cancelled` and never reaches the model.

Admission: the line is bounded. An arrival that would wait behind `max_waiting` others is refused by
`reserve` itself (a 503 with `Retry-After`), before any retrieval or any response has started. A ticket
whose turn has not come `timeout_s` after it arrived gets a 503 too. Search and passage requests never
pass through here.
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


class Cancelled(Exception):
    """The ticket was given back while it waited (the client left): the request ends without the model."""


def _queue_full(retry_after: int) -> UserError:
    return UserError("queue_full", "The assistant is busy (queue full); please retry in a moment.",
                     "助手正忙（排队已满），请稍后重试。", status=503, retry_after=retry_after)


def _queue_timeout(timeout_s: float, retry_after: int) -> UserError:
    return UserError("queue_timeout", f"The assistant is busy: no turn within {timeout_s:g} s; please retry.",
                     f"助手正忙：{timeout_s:g} 秒内未排到，请稍后重试。", status=503, retry_after=retry_after)


class GenerationQueue:
    def __init__(self, max_waiting: int = 16, timeout_s: float | None = None, retry_after_s: int = 5) -> None:
        self.max_waiting = max_waiting
        self.timeout_s = timeout_s or None  # None or 0: wait as long as it takes
        self.retry_after_s = retry_after_s
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

    def position(self, ticket: Ticket) -> int:
        """How many requests are ahead of this ticket in line (0: it holds the model, is next, or has left)."""
        with self._cond:
            return self._line.index(ticket.number) if ticket.number in self._line else 0

    def reserve(self) -> Ticket:
        """Take a place in line now (at arrival), or a 503 UserError when `max_waiting` are already waiting."""
        with self._cond:
            if len(self._line) - (1 if self._serving is not None else 0) >= self.max_waiting:
                raise _queue_full(self.retry_after_s)
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
        """Hold the model for one generation; yields the seconds waited since the ticket was taken.
        Raises `Cancelled` when the ticket is (or gets) cancelled before its turn, and a 503 UserError when the
        turn has not come `timeout_s` after the ticket's arrival."""
        ticket = ticket or self.reserve()
        deadline = ticket.arrived + self.timeout_s if self.timeout_s else None
        with self._cond:
            while True:
                if ticket.number not in self._line:
                    raise Cancelled(ticket.number)
                if self._line[0] == ticket.number:
                    break
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    self._line.remove(ticket.number)
                    self._cond.notify_all()
                    raise _queue_timeout(self.timeout_s or 0.0, self.retry_after_s)
                self._cond.wait(left)
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
