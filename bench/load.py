"""A bounded load test on loopback: N concurrent asyncio clients (httpx.AsyncClient) for a fixed time against
one real server, mixing hybrid search (POST /api/search), answers (POST /api/ask) and streamed answers
(POST /api/ask with stream=true, Server-Sent Events). It stops by itself when the time is up (requests in
flight are finished), then reads every answered session back through the API. A server this script starts
has a key per client; the time is split in two phases: every client sending the first key (one caller, as
clients behind one IP are without keys: the rate limit refuses most), then each client its own key (the
rate limit no longer binds; the queue and the stream cap do). Every other setting is the server's default.

Reported: requests per kind, status counts, p50/p99 latency per kind (of the 2xx and of all), time to the
first event of the streams, throughput; and the checks:
- no_5xx: no 5xx other than a 503 refusal with Retry-After;
- answered_or_refused: every response is a 2xx, or a 429/503 with a `Retry-After` header (no transport error);
- streams_end: every stream that started ends with a `done` event or a clean refusal (an `error` event with a
  code, e.g. the queue wait's time-out);
- nothing_lost: every answer that came back (JSON 200 or a stream's `done`) is in its session afterwards
  (GET /api/sessions/{id} lists its message_id).
A refused client waits the Retry-After (at most --max-backoff seconds) before its next request, like a
polite client. Prints a table; --json writes the whole report.

    python bench/load.py --base-url http://127.0.0.1:7860 [--clients 20] [--duration 120] [--json out.json]
    python bench/load.py --index-dir DIR        # starts its own `assistant serve` (fast model) on a free port
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from api_latency import pct  # noqa: E402
from httpkit import sse_events  # noqa: E402

KINDS = ("search", "ask", "stream")
QUESTIONS = ["What does ZeRO stage 2 partition?", "什么是张量并行？", "What does jax.jit do?",
             "飞桨的动转静是什么？", "What is FSDP in PyTorch?", "TensorFlow 的分布式 API 叫什么？",
             "What is pipeline parallelism in DeepSpeed?", "Colossal-AI 的 Gemini 是什么？"]
QUERIES = ["混合精度训练", "pipeline parallelism", "ZeRO offload", "张量并行", "jax.pmap", "Ascend NPU"]
REFUSALS = (429, 503)


@dataclass
class Result:
    kind: str
    status: int  # 0: no response (transport error)
    latency_s: float
    retry_after: str | None = None
    first_event_s: float | None = None  # streams: time to the first SSE event
    end: str = ""  # streams with status 200: "done", "error:<code>" or "cut" (ended without either)
    answer: tuple[str, str] | None = None  # (session_id, message_id) of an answer that came back
    error: str = ""
    key: str | None = field(default=None, repr=False)  # the API key it was sent with (sessions are the key's)


@dataclass
class Load:
    clients: int
    duration_s: float
    results: list[Result] = field(default_factory=list)
    elapsed_s: float = 0.0
    lost: list[tuple[str, str]] = field(default_factory=list)
    read_back: int = 0


async def one_search(c: httpx.AsyncClient, rng: random.Random, headers: dict[str, str]) -> Result:
    t0 = time.perf_counter()
    r = await c.post("/api/search", json={"query": rng.choice(QUERIES), "k": 5}, headers=headers)
    return Result("search", r.status_code, time.perf_counter() - t0, r.headers.get("retry-after"))


async def one_ask(c: httpx.AsyncClient, rng: random.Random, headers: dict[str, str]) -> Result:
    t0 = time.perf_counter()
    r = await c.post("/api/ask", json={"question": rng.choice(QUESTIONS)}, headers=headers)
    res = Result("ask", r.status_code, time.perf_counter() - t0, r.headers.get("retry-after"))
    if r.status_code == 200:
        body = r.json()
        res.answer = (body["session_id"], body["message_id"])
    return res


async def one_stream(c: httpx.AsyncClient, rng: random.Random, headers: dict[str, str]) -> Result:
    t0 = time.perf_counter()
    async with c.stream("POST", "/api/ask", json={"question": rng.choice(QUESTIONS), "stream": True},
                        headers=headers) as r:
        res = Result("stream", r.status_code, 0.0, r.headers.get("retry-after"))
        if r.status_code != 200:
            await r.aread()
            res.latency_s = time.perf_counter() - t0
            return res
        lines: list[str] = []
        async for line in r.aiter_lines():
            if res.first_event_s is None and line.startswith("event:"):
                res.first_event_s = time.perf_counter() - t0
            lines.append(line)
    res.latency_s = time.perf_counter() - t0
    res.end = "cut"
    for event, data in sse_events(lines):
        if event == "done" and isinstance(data, dict):
            res.end, res.answer = "done", (data["session_id"], data["message_id"])
        elif event == "error" and isinstance(data, dict) and data.get("code"):
            res.end = "error:" + str(data["code"])
    return res


ONE = {"search": one_search, "ask": one_ask, "stream": one_stream}


async def client(c: httpx.AsyncClient, n: int, key: str | None, deadline: float, weights: list[float],
                 load: Load, max_backoff: float) -> None:
    rng = random.Random(n)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    while time.perf_counter() < deadline:
        kind = rng.choices(KINDS, weights)[0]
        t0 = time.perf_counter()
        try:
            res = await ONE[kind](c, rng, headers)
        except (httpx.HTTPError, ValueError, KeyError) as exc:  # transport error, or a body that is not what it says
            res = Result(kind, 0, time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}"[:200])
        res.key = key
        load.results.append(res)
        if res.status in REFUSALS:
            try:
                wait = float(res.retry_after or 1)
            except ValueError:
                wait = 1.0
            await asyncio.sleep(min(wait, max_backoff) * rng.uniform(0.5, 1.0))


async def run_load(base_url: str, clients: int = 20, duration_s: float = 120.0, weights: tuple[float, ...] = (1, 1, 1),
                   api_keys: list[str] | None = None, timeout_s: float = 300.0, max_backoff: float = 2.0) -> Load:
    """Run the clients until `duration_s` is up, then read every answered session back. Client n sends
    api_keys[n % len(api_keys)] (none without keys): one key for all makes them one caller to the rate limit."""
    keys: list[str | None] = list(api_keys) if api_keys else [None]
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    load = Load(clients, duration_s)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits) as c:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c, n, keys[n % len(keys)], t0 + duration_s, list(weights), load, max_backoff)
                               for n in range(clients)))
        load.elapsed_s = time.perf_counter() - t0
        by_session: dict[tuple[str | None, str], set[str]] = defaultdict(set)
        for res in load.results:
            if res.answer:
                by_session[res.key, res.answer[0]].add(res.answer[1])
        for (key, sid), mids in by_session.items():
            r = await c.get(f"/api/sessions/{sid}", headers={"authorization": f"Bearer {key}"} if key else {})
            stored = {m["id"] for m in r.json().get("messages", [])} if r.status_code == 200 else set()
            load.read_back += len(mids)
            load.lost += [(sid, m) for m in sorted(mids - stored)]
    return load


def summary(load: Load) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for kind in KINDS:
        rows = [r for r in load.results if r.kind == kind]
        ok = [r.latency_s for r in rows if 200 <= r.status < 300]
        ttfe = [r.first_event_s for r in rows if r.first_event_s is not None]
        kinds[kind] = {
            "requests": len(rows), "ok": len(ok), "status": dict(sorted(Counter(str(r.status) for r in rows).items())),
            "p50_s": pct(ok, 50), "p99_s": pct(ok, 99),
            "p50_all_s": pct([r.latency_s for r in rows], 50), "p99_all_s": pct([r.latency_s for r in rows], 99),
            **({"first_event_p50_s": pct(ttfe, 50), "first_event_p99_s": pct(ttfe, 99),
                "ends": dict(Counter(r.end for r in rows if r.status == 200))} if kind == "stream" else {}),
        }
    total = len(load.results)
    ok_total = sum(k["ok"] for k in kinds.values())
    bad_status = [r for r in load.results if not (200 <= r.status < 300 or (r.status in REFUSALS and r.retry_after))]
    checks = {
        "no_5xx": not any(r.status >= 500 and not (r.status == 503 and r.retry_after) for r in load.results),
        "answered_or_refused": not bad_status,
        "streams_end": all(r.end == "done" or r.end.startswith("error:") for r in load.results
                           if r.kind == "stream" and r.status == 200),
        "nothing_lost": not load.lost,
        "some_of_each_kind_ok": all(kinds[k]["ok"] > 0 for k in KINDS),
    }
    return {"clients": load.clients, "duration_s": load.duration_s, "elapsed_s": round(load.elapsed_s, 2),
            "requests": total, "ok": ok_total, "throughput_rps": total / load.elapsed_s if load.elapsed_s else 0.0,
            "ok_throughput_rps": ok_total / load.elapsed_s if load.elapsed_s else 0.0, "kinds": kinds,
            "answers_read_back": load.read_back, "lost": load.lost, "checks": checks,
            "passed": all(checks.values()),
            "failures": [{k: v for k, v in asdict(r).items() if k != "key"} for r in bad_status[:20]]}


def table(s: dict[str, Any]) -> str:
    f = "{:<7} {:>6} {:>5} {:>8} {:>8} {:>9} {:>9}  {}"
    out = [f.format("kind", "reqs", "2xx", "p50 s", "p99 s", "1st ev50", "1st ev99", "status counts")]
    for kind, k in s["kinds"].items():
        out.append(f.format(kind, k["requests"], k["ok"], f"{k['p50_s']:.3f}", f"{k['p99_s']:.3f}",
                            f"{k['first_event_p50_s']:.3f}" if "first_event_p50_s" in k else "-",
                            f"{k['first_event_p99_s']:.3f}" if "first_event_p99_s" in k else "-",
                            " ".join(f"{c}:{n}" for c, n in k["status"].items())
                            + (f"  ends {k['ends']}" if k.get("ends") else "")))
    out.append(f"{s['requests']} requests in {s['elapsed_s']:.1f} s with {s['clients']} clients: "
               f"{s['throughput_rps']:.2f} req/s, {s['ok_throughput_rps']:.2f} answered (2xx)/s; "
               f"{s['answers_read_back']} answers read back, {len(s['lost'])} lost")
    out.append("checks: " + ", ".join(f"{n} {'ok' if v else 'FAILED'}" for n, v in s["checks"].items()))
    return "\n".join(out)


def run_phases(base_url: str, clients: int, duration_s: float, keys: list[str], shared_fraction: float,
               weights: tuple[float, ...] = (1, 1, 1), max_backoff: float = 2.0) -> dict[str, Any]:
    """Two phases of the one time budget: `shared_fraction` of it with every client on the first key (one
    caller: the per-key, or per-IP without keys, rate limit refuses most), the rest with a key per client (the
    rate limit no longer binds; the queue and the stream cap do). Without keys only the first phase runs."""
    phases: dict[str, Any] = {}
    plan = [("one_caller", duration_s * (shared_fraction if keys else 1.0), keys[:1]),
            ("key_per_client", duration_s * (1.0 - shared_fraction) if keys else 0.0, keys)]
    for name, seconds, phase_keys in plan:
        if seconds > 0:
            load = asyncio.run(run_load(base_url, clients, seconds, weights, phase_keys, max_backoff=max_backoff))
            phases[name] = summary(load)
    return {"phases": phases, "passed": all(p["passed"] for p in phases.values())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", help="a running server; without it one is started (needs --index-dir)")
    ap.add_argument("--index-dir", help="index for the server this script starts (fast model, a key per client)")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--duration", type=float, default=120.0, help="seconds, all phases together")
    ap.add_argument("--shared-fraction", type=float, default=0.5,
                    help="share of the time all clients send one key (the rest: a key each); needs keys")
    ap.add_argument("--mix", default="1,1,1", help="weights of search,ask,stream")
    ap.add_argument("--api-keys", default="", help="comma-separated keys of the --base-url server")
    ap.add_argument("--max-backoff", type=float, default=2.0)
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    weights = tuple(float(w) for w in args.mix.split(","))
    keys = [k for k in args.api_keys.split(",") if k]
    srv = None
    base = args.base_url
    if base is None:
        if not args.index_dir:
            ap.error("give --base-url or --index-dir")
        from httpkit import ServerProcess

        state = Path(tempfile.mkdtemp(prefix="load-state-"))
        keys = [f"load-key-{n:02d}-" + secrets.token_hex(12) for n in range(args.clients)]
        srv = ServerProcess(Path(args.index_dir), state, state / "server.log", ASSISTANT_MODEL="fast",
                            ASSISTANT_MAX_ANSWER_TOKENS="64", ASSISTANT_API_KEYS=",".join(keys))
        srv.start(timeout=900)  # a busy machine: the model and the UI load slowly
        base = srv.base
    try:
        report = run_phases(base, args.clients, args.duration, keys, args.shared_fraction, weights, args.max_backoff)
    finally:
        if srv is not None:
            srv.stop()
    for name, s in report["phases"].items():
        print(f"== {name}")
        print(table(s))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
