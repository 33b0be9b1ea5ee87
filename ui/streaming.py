"""Bridge from the service's synchronous event generator (CPU work) to async routes.

One producer thread per answer runs the generator to its end and hands each event to the event loop
(`call_soon_threadsafe`), so the loop keeps serving other requests and no thread-pool hop is paid per
token. Token events that pile up while the client is being written to are sent as one event: on two
cores every bit of work beside llama.cpp's threads slows decoding (measured in docs/performance.md).
The first event is awaited before the response starts, so bad input still gets a proper 4xx status
instead of an in-stream error. If the client goes away, the producer stops at the next event and closes
the generator, which gives the model's queue turn back.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Iterator

from assistant.errors import UserError
from assistant.llm.base import ModelError
from assistant.types import Event

from .requestid import current_request_id

log = logging.getLogger("ui.streaming")
_END = object()


def error_event(exc: BaseException, lang: str) -> Event:
    """The "error" event for a service that raised after the stream started: {code, message} in `lang`."""
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


async def open_stream(gen: Iterator[Event], lang: str) -> AsyncIterator[Event]:
    """Start the producer, await the first event (errors propagate), then iterate over all events."""
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

    threading.Thread(target=produce, name="answer-stream", daemon=True).start()
    first = await inbox.get()
    if isinstance(first, _Failure):
        stop.set()
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
            stop.set()

    return events()
