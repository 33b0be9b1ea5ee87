"""Bridge from the service's synchronous event generator (CPU work) to async routes.

Each `next()` runs in a worker thread, so the event loop keeps serving other requests. The first event is
pulled before the response starts, so bad input still gets a proper 4xx status instead of an in-stream error.
If the client goes away, the generator is closed (in a thread, shielded from cancellation), which releases
the model's queue turn.
"""
from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import anyio
from starlette.concurrency import run_in_threadpool

from assistant.errors import UserError
from assistant.service import Event

log = logging.getLogger("ui.streaming")
_END = object()


def _next(gen: Iterator[Event]) -> object:
    return next(gen, _END)


def localize(ev: Event, lang: str) -> Event:
    """An error event from the service carries both languages; clients get {code, message} in theirs."""
    if ev.kind != "error" or not isinstance(ev.data, dict):
        return ev
    d = ev.data
    return Event("error", {"code": d.get("code", "error"), "message": d.get(f"message_{lang}", d.get("message", ""))})


def error_event(exc: BaseException, lang: str) -> Event:
    if isinstance(exc, UserError):
        return Event("error", {"code": exc.code, "message": exc.message(lang)})
    log.error("stream failed", exc_info=exc)
    return Event("error", {"code": "internal_error",
                           "message": "服务器内部错误，请稍后重试。" if lang == "zh" else "Internal error; please retry."})


async def open_stream(gen: Iterator[Event], lang: str) -> AsyncIterator[Event]:
    """Pull the first event now (errors propagate), then return an async iterator over all events."""
    first = await run_in_threadpool(_next, gen)

    async def events() -> AsyncIterator[Event]:
        try:
            if first is _END:
                return
            yield localize(first, lang)  # type: ignore[arg-type]
            while True:
                try:
                    ev = await run_in_threadpool(_next, gen)
                except Exception as exc:  # noqa: BLE001 - reported to the client as an error event
                    yield error_event(exc, lang)
                    return
                if ev is _END:
                    return
                yield localize(ev, lang)  # type: ignore[arg-type]
        finally:
            with anyio.CancelScope(shield=True):
                await run_in_threadpool(gen.close)

    return events()
