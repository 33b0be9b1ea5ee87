"""Bridge from the service's synchronous event generator (CPU work) to async routes.

One producer thread per answer runs the generator to its end and hands each event to the event loop
(`call_soon_threadsafe`), so the loop keeps serving other requests and no thread-pool hop is paid per
token. Token events that pile up while the client is being written to are sent as one event: on two
cores every bit of work beside llama.cpp's threads slows decoding (measured in docs/performance.md).
The first event is awaited before the response starts, so bad input still gets a proper 4xx status
instead of an in-stream error. If the client goes away, `on_close` runs at once (the answer routes give
their queue ticket back, which wakes a producer still waiting for its turn: it ends without the model),
and a producer that is generating stops at the next event and closes the generator.

`open_answer_stream` is the routes' entry: a stream slot (ui/admission.py StreamSlots, held until the
producer thread ends, so threads are bounded too) and a queue ticket are taken on arrival, on the event
loop; either refusal is a 503 with Retry-After before any response has started.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from assistant.errors import UserError
from assistant.genqueue import Ticket
from assistant.llm.base import ModelError
from assistant.openai_http import RemoteError
from assistant.types import Event

from .requestid import current_request_id

log = logging.getLogger("ui.streaming")
_END = object()


def error_event(exc: BaseException, lang: str) -> Event:
    """The "error" event for a service that raised after the stream started: {code, message} in `lang`."""
    if isinstance(exc, RemoteError):  # a remote engine failed mid-answer: what failed, not its URL (logged)
        log.error("remote engine failed in a stream (request %s): %s", current_request_id(), exc.en)
        return Event("error", {"code": exc.code, "message": exc.public_message(lang)})
    if isinstance(exc, UserError):
        return Event("error", {"code": exc.code, "message": exc.message(lang)})
    rid = current_request_id()
    log.error("stream failed (request %s)", rid, exc_info=exc)  # the details stay in the log
    code, zh, en = (("model_error", "模型暂不可用，请稍后重试。", "The model is unavailable; please retry later.")
                    if isinstance(exc, ModelError) else
                    ("internal_error", "服务器内部错误，请稍后重试。", "Internal error; please retry."))
    return Event("error", {"code": code, "request_id": rid,
                           "message": f"{zh}（请求编号 {rid}）" if lang == "zh" else f"{en} (request id {rid})"})


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def merge_tokens(batch: list[object]) -> list[object]:
    """Consecutive token events become one (same text, fewer writes); other events keep their place."""
    out: list[object] = []
    for ev in batch:
        if (isinstance(ev, Event) and ev.kind == "token" and out and isinstance(out[-1], Event)
                and out[-1].kind == "token"):
            out[-1] = Event("token", out[-1].data + ev.data)
        else:
            out.append(ev)
    return out


async def open_answer_stream(service: Any, slots: Any, lang: str,
                             answer: Callable[[Ticket], Iterator[Event]]) -> AsyncIterator[Event]:
    """A stream slot and a queue ticket now (503s otherwise), then `answer(ticket)`'s events via open_stream."""
    release = slots.acquire()
    try:
        ticket = service.admit()  # on the event loop: the queue order is the arrival order
    except BaseException:
        release()
        raise
    return await open_stream(answer(ticket), lang, on_close=lambda: service.withdraw(ticket), release=release)


async def open_stream(gen: Iterator[Event], lang: str, *, on_close: Callable[[], None] | None = None,
                      release: Callable[[], None] | None = None) -> AsyncIterator[Event]:
    """Start the producer, await the first event (errors propagate), then iterate over all events.
    `on_close` runs when the consumer stops (done, failed or the client left); `release` when the producer
    thread ends."""
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[object] = asyncio.Queue()
    stop = threading.Event()

    def put(item: object) -> None:
        try:
            loop.call_soon_threadsafe(inbox.put_nowait, item)
        except RuntimeError:  # the loop is gone (server shutting down): nobody is listening
            stop.set()

    def produce() -> None:
        try:
            for ev in gen:
                put(ev)
                if stop.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            put(_Failure(exc))
        finally:
            gen.close()
            put(_END)
            if release is not None:
                release()

    def closed() -> None:
        stop.set()
        if on_close is not None:
            on_close()

    try:
        threading.Thread(target=produce, name="answer-stream", daemon=True).start()
    except BaseException:
        if release is not None:
            release()
        raise
    try:
        first = await inbox.get()
    except BaseException:  # cancelled: the client left before the first event
        closed()
        raise
    if isinstance(first, _Failure):
        closed()
        raise first.exc

    async def events() -> AsyncIterator[Event]:
        try:
            item = first
            while item is not _END:
                batch = [item]
                while not inbox.empty():
                    batch.append(inbox.get_nowait())
                for ev in merge_tokens(batch):
                    if ev is _END:
                        return
                    if isinstance(ev, _Failure):
                        yield error_event(ev.exc, lang)
                        return
                    assert isinstance(ev, Event)
                    yield ev
                item = await inbox.get()
        finally:
            closed()

    return events()
