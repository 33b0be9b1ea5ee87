"""The generation queue: first come, first served from arrival, cancelled places skipped, a bounded line
refused on arrival, a wait time-out, a cancelled waiter woken at once;
and the SSE bridge merging token events without reordering anything else."""
from __future__ import annotations

import threading
import time

import pytest

from assistant.errors import UserError
from assistant.genqueue import Cancelled, GenerationQueue
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


def test_a_full_line_is_refused_on_arrival() -> None:
    q = GenerationQueue(max_waiting=1)
    a = q.reserve()
    hold = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with q.turn(a):
            hold.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    hold.wait(5)
    b = q.reserve()  # waits behind a: the one place in line
    with pytest.raises(UserError) as err:  # c would be the second to wait: refused by reserve itself
        q.reserve()
    assert err.value.status == 503 and err.value.code == "queue_full" and err.value.retry_after == 5
    assert q.waiting == 1  # only b is left waiting
    release.set()
    t.join(5)
    with q.turn(b):
        pass
    assert q.waiting == 0
    q.reserve()  # room again


def test_a_wait_times_out_and_a_cancelled_waiter_wakes_at_once() -> None:
    q = GenerationQueue(max_waiting=4, timeout_s=0.3, retry_after_s=7)
    a, b, c = q.reserve(), q.reserve(), q.reserve()
    outcome: dict[str, object] = {}

    def wait_for(name: str, ticket) -> None:
        started = time.perf_counter()
        try:
            with q.turn(ticket):
                outcome[name] = "served"
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertions
            outcome[name] = exc
        outcome[name + "_s"] = time.perf_counter() - started

    with q.turn(a):
        tb = threading.Thread(target=wait_for, args=("b", b))
        tc = threading.Thread(target=wait_for, args=("c", c))
        tb.start()
        tc.start()
        time.sleep(0.05)
        q.cancel(c)  # c's client left
        tc.join(5)
        assert isinstance(outcome["c"], Cancelled) and outcome["c_s"] < 0.2  # woke at once, not at the time-out
        tb.join(5)
    err = outcome["b"]
    assert isinstance(err, UserError) and err.code == "queue_timeout" and err.status == 503 and err.retry_after == 7
    assert q.waiting == 0 and q.served == 1


def test_merge_tokens_keeps_other_events_in_place() -> None:
    evs = [Event("sources", []), Event("token", "Py"), Event("token", "Torch"), Event("citations", []),
           Event("token", "x"), Event("done", None)]
    merged = merge_tokens(evs)  # type: ignore[arg-type]
    assert [(e.kind, e.data) for e in merged] == [("sources", []), ("token", "PyTorch"), ("citations", []),
                                                  ("token", "x"), ("done", None)]
