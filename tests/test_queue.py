"""The generation queue: first come, first served from arrival, cancelled places skipped, bounded line;
and the SSE bridge merging token events without reordering anything else."""
from __future__ import annotations

import threading
import time

import pytest

from assistant.errors import UserError
from assistant.genqueue import GenerationQueue
from assistant.types import Event
from ui.streaming import merge_tokens


def test_turns_follow_arrival_not_the_order_retrievals_finish() -> None:
    q = GenerationQueue(max_waiting=16)
    served: list[int] = []
    tickets = [q.reserve() for _ in range(6)]  # six requests arrive in order 0..5

    def request(i: int) -> None:
        time.sleep(0.05 * (6 - i))  # later arrivals finish their "retrieval" first
        with q.turn(tickets[i]):
            served.append(i)
            time.sleep(0.01)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert served == [0, 1, 2, 3, 4, 5]
    assert q.served == 6 and q.waiting == 0


def test_a_cancelled_place_does_not_block_the_line() -> None:
    q = GenerationQueue()
    first, refused, third = q.reserve(), q.reserve(), q.reserve()
    order: list[str] = []

    def later() -> None:
        with q.turn(third):
            order.append("third")

    t = threading.Thread(target=later)
    t.start()
    with q.turn(first):
        order.append("first")
    q.cancel(refused)  # e.g. an out-of-scope question: refused without the model
    t.join(5)
    assert order == ["first", "third"] and not t.is_alive()
    q.cancel(refused)  # idempotent
    assert q.waiting == 0


def test_a_full_line_is_a_503_and_gives_the_place_back() -> None:
    q = GenerationQueue(max_waiting=1)
    a, b, c = q.reserve(), q.reserve(), q.reserve()
    hold = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with q.turn(a):
            hold.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    hold.wait(5)
    with pytest.raises(UserError) as err:  # b waits (1 ahead of c is the limit), c would be the second
        with q.turn(c):
            pass
    assert err.value.status == 503 and err.value.code == "queue_full"
    assert q.waiting == 1  # only b is left waiting
    release.set()
    t.join(5)
    with q.turn(b):
        pass
    assert q.waiting == 0


def test_merge_tokens_keeps_other_events_in_place() -> None:
    evs = [Event("sources", []), Event("token", "Py"), Event("token", "Torch"), Event("citations", []),
           Event("token", "x"), Event("done", None)]
    merged = merge_tokens(evs)  # type: ignore[arg-type]
    assert [(e.kind, e.data) for e in merged] == [("sources", []), ("token", "PyTorch"), ("citations", []),
                                                  ("token", "x"), ("done", None)]
