"""Concurrency on one model: 8 clients at once against a server this script starts (loopback, bounded).

Each client asks 2 questions (streaming, read to the end); meanwhile a probe thread times /api/search and
/api/passages requests, which must never wait behind generation. Printed: per-request time to first token
in arrival order (first come, first served means they rise with arrival), the search latency while the
model is busy against an idle baseline, the largest queue length seen in /metrics, and the total wait.

    python bench/concurrency.py [--model fast] [--clients 8] [--per-client 2] [--index-dir DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

QUESTIONS = ["What does ZeRO stage 2 partition?", "什么是张量并行？", "What does jax.jit do?",
             "飞桨的动转静是什么？", "What is FSDP in PyTorch?", "TensorFlow 的分布式 API 叫什么？",
             "What is pipeline parallelism in DeepSpeed?", "Colossal-AI 的 Gemini 是什么？"]


def ask(base: str, q: str, t_start: float, out: list[dict], lock: threading.Lock) -> None:
    sent = time.perf_counter() - t_start
    first = None
    ticket = None
    with httpx.Client(base_url=base, timeout=900) as c, c.stream("POST", "/api/ask",
                                                                json={"question": q, "stream": True}) as r:
        event = ""
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "token" and first is None:
                first = time.perf_counter() - t_start
            elif line.startswith("data:") and event == "done":
                ticket = json.loads(line[5:]).get("queue", {}).get("ticket")
    with lock:
        out.append({"q": q, "sent": sent, "first": first, "done": time.perf_counter() - t_start, "ticket": ticket})


def probe(base: str, stop: threading.Event, lat: list[float], queue_max: list[int]) -> None:
    with httpx.Client(base_url=base, timeout=60) as c:
        while not stop.is_set():
            t = time.perf_counter()
            c.post("/api/search", json={"query": "ZeRO optimizer state partitioning", "k": 5})
            lat.append(time.perf_counter() - t)
            m = re.search(r"assistant_generation_queue_waiting\s+([0-9.]+)", c.get("/metrics").text)
            if m:
                queue_max[0] = max(queue_max[0], int(float(m.group(1))))
            time.sleep(0.2)


def main() -> int:
    from httpkit import ServerProcess

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="fast")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--per-client", type=int, default=2)
    ap.add_argument("--index-dir", default=os.environ.get("ASSISTANT_INDEX_DIR", str(REPO / "index")))
    args = ap.parse_args()
    state = Path(tempfile.mkdtemp(prefix="conc-"))
    srv = ServerProcess(Path(args.index_dir), state, state / "server.log", ASSISTANT_MAX_ANSWER_TOKENS="64",
                        ASSISTANT_MODEL=args.model)
    srv.start(timeout=600)
    try:
        idle: list[float] = []
        with httpx.Client(base_url=srv.base) as c:
            for _ in range(20):
                t = time.perf_counter()
                c.post("/api/search", json={"query": "ZeRO optimizer state partitioning", "k": 5})
                idle.append(time.perf_counter() - t)
        busy: list[float] = []
        queue_max = [0]
        stop = threading.Event()
        prober = threading.Thread(target=probe, args=(srv.base, stop, busy, queue_max))
        prober.start()
        rows: list[dict] = []
        lock = threading.Lock()
        t0 = time.perf_counter()
        threads = []
        for i in range(args.clients * args.per_client):
            th = threading.Thread(target=ask, args=(srv.base, QUESTIONS[i % len(QUESTIONS)], t0, rows, lock))
            th.start()
            threads.append(th)
            time.sleep(0.05)  # a definite arrival order
        for th in threads:
            th.join()
        stop.set()
        prober.join()
        metrics = httpx.get(srv.base + "/metrics").text
    finally:
        srv.stop()
    rows.sort(key=lambda r: r["sent"])
    firsts = [r["first"] or float("inf") for r in rows]
    inversions = sum(1 for a, b in zip(firsts, firsts[1:], strict=False) if b < a)
    print(f"{len(rows)} requests from {args.clients} clients; model {args.model}")
    for r in rows:
        print(f"  sent {r['sent']:5.2f} s  ticket {r.get('ticket')}  first token {r['first'] or float('nan'):6.1f} s  "
              f"done {r['done']:6.1f} s  {r['q']}")
    print(f"first-token order inversions against the clients' send order: {inversions}")
    by_ticket = sorted((r for r in rows if r.get("ticket") is not None), key=lambda r: r["ticket"])
    t_firsts = [r["first"] or float("inf") for r in by_ticket]
    t_inv = sum(1 for a, b in zip(t_firsts, t_firsts[1:], strict=False) if b < a)
    swapped = sum(1 for a, b in zip(by_ticket, by_ticket[1:], strict=False) if b["sent"] < a["sent"])
    print(f"first-token order inversions against the server's arrival order (queue tickets): {t_inv} "
          f"(0 = strictly first come, first served); requests that reached the server out of send order: {swapped}")
    print(f"search while generating: p50 {1000 * statistics.median(busy):.0f} ms, max {1000 * max(busy):.0f} ms "
          f"({len(busy)} probes); idle p50 {1000 * statistics.median(idle):.0f} ms")
    print(f"largest queue length seen in /metrics: {queue_max[0]}")
    m = re.search(r"assistant_generation_queue_wait_seconds_total\s+([0-9.e+]+)", metrics) or re.search(
        r"assistant_generation_queue_wait_seconds\s+([0-9.e+]+)", metrics)
    if m:
        print(f"total queue wait: {float(m.group(1)):.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
