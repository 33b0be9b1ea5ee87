"""Stopping an answer while it is being written: the stop button, `POST /api/sessions/{id}/cancel`, a client
that closes its stream, `assistant`'s Ctrl-C.

Owns the registry of answers in progress (`ActiveAnswers`, one per session: a newer answer in the same session
waits for the older one), the token loop that ends the model's stream as soon as a stop is asked for
(`stoppable_tokens`: the engine computes no further token, and the queue place is given back at once when the
answer was still waiting for the model), and what a stopped answer keeps (`check_stopped`): the text written
so far, every sentence of it, with a citation only where the citation check supports it. A stopped answer is
never replaced by a quote of the evidence or by a refusal: the user stopped it, it is theirs as written.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .answer.citations import CitationChecker
from .answer.pipeline import Generation, PipelineConfig, Result
from .answer.prompt import Source
from .embed import Embedder
from .genqueue import GenerationQueue, Ticket
from .types import Event


@dataclass
class StopHandle:
    """One answer in progress: `stop()` asks it to end; `asked` says whether someone did."""

    ticket: Ticket
    queue: GenerationQueue
    event: threading.Event = field(default_factory=threading.Event)
    asked_at: float | None = None

    @property
    def asked(self) -> bool:
        return self.event.is_set()

    def stop(self) -> None:
        if not self.event.is_set():
            self.asked_at = time.perf_counter()
            self.event.set()
        self.queue.cancel(self.ticket)  # still waiting for the model: its place goes now (no-op once serving)


class ActiveAnswers:
    """The answers being written, by session id: one at a time in a session."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._by_session: dict[str, StopHandle] = {}

    @contextmanager
    def track(self, session_id: str, ticket: Ticket, queue: GenerationQueue,
              wait_s: float | None = None) -> Iterator[StopHandle]:
        """The session's answer in progress while the block runs. A second answer in the same session (a question
        sent while the first is still being written or stopped) waits here until the first is saved, so it sees that
        turn and is never lost; after `wait_s` (an abandoned stream) it takes the first one's place."""
        handle = StopHandle(ticket, queue)
        deadline = None if wait_s is None else time.monotonic() + wait_s
        with self._lock:
            while session_id in self._by_session:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._lock.wait(left)
            self._by_session[session_id] = handle
        try:
            yield handle
        finally:
            with self._lock:
                if self._by_session.get(session_id) is handle:
                    del self._by_session[session_id]
                self._lock.notify_all()

    def stop(self, session_id: str) -> bool:
        """Ask the session's answer in progress to stop; False when none is being written."""
        with self._lock:
            handle = self._by_session.get(session_id)
        if handle is None:
            return False
        handle.stop()
        return True

    def running(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._by_session


def stoppable_tokens(pieces: Generator[str, None, Generation], stop: threading.Event, written: list[str],
                     started: float) -> Generator[Event, None, Generation]:
    """The model's pieces as "token" events, each also appended to `written` (what a stopped answer keeps);
    returns the Generation. When `stop` is set, the model's stream is closed before another token is
    computed and the Generation holds what was written. Closing this generator closes the model's stream."""
    first: float | None = None
    try:
        while not stop.is_set():
            try:
                piece = next(pieces)
            except StopIteration as done:
                return done.value
            if first is None:
                first = time.perf_counter() - started
            written.append(piece)
            yield Event("token", piece)
        return Generation("".join(written), first, 0, len(written))
    finally:
        pieces.close()


def check_stopped(raw: str, sources: list[Source], config: PipelineConfig, embedder: Embedder) -> Result:
    """What a stopped answer keeps: every sentence written, each [n] only where the check supports it."""
    if not raw.strip():
        return Result("", [], diagnostics={"raw_answer": raw, "stopped": True})
    checker = CitationChecker(embedder, config.support_threshold, drop_unsupported=False, quote_threshold=None)
    checked = checker.check(raw, sources)
    return Result(checked.text or raw.strip(), checked.citations, diagnostics={
        "raw_answer": raw, "stopped": True, "factual_sentences": checked.factual_sentences,
        "supported_sentences": checked.supported_sentences})
