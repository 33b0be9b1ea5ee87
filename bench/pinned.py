"""The pinned prefix against today's pipeline without it, measured in the same process, question by question.

For dev questions of bench/data/retrieval.jsonl (article questions: a source file under corpus/article/; docs
questions: only framework-docs/ sources), each asked twice through AssistantService.ask, once with the pinned
context and once without (the order alternates), on one loaded model:
  ttft      time to the first token (answer.timings), p50 and p95, per kind and configuration;
  prompt    prompt tokens, and the tokens llama.cpp actually prefilled (the rest came from the KV cache);
  decode    decode tokens/s with and without the ~3k-token prefix (attention over more tokens);
and once: the prefix's build time (prefill into an empty cache dir), the state file's size and its load time at
a second start, and the process's RSS before the model and after both configurations.

With --remote the same service talks to a real `python -m llama_cpp.server` (backend=openai) instead: the
prefix is sent byte-identical with every question, so the server's own prefix cache should make every question
after the first start fast; it prints each question's time to first token.

    python bench/pinned.py [--model default|fast] [--per-kind 8] [--index-dir DIR] [--json OUT] [--remote]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from assistant.llm.llamacpp import LlamaCppChatModel  # noqa: E402
from assistant.service import AssistantService  # noqa: E402
from assistant.settings import load_settings  # noqa: E402


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def questions(per_kind: int) -> dict[str, list[str]]:
    rows = [json.loads(x) for x in (REPO / "bench" / "data" / "retrieval.jsonl").read_text().splitlines() if x]
    dev = [r for r in rows if r["split"] == "dev"]
    article = [r["question"] for r in dev if any("corpus/article/" in f for f in r["source_files"])]
    docs = [r["question"] for r in dev if all(f.startswith("framework-docs/") for f in r["source_files"])]
    return {"article": article[:per_kind], "docs": docs[:per_kind]}


def remote(args: argparse.Namespace, over: dict) -> dict:
    """Time to first token of consecutive questions through a real llama_cpp.server: the first pays the prefix."""
    from llamaserver import llama_server

    from assistant.llm.models import prepare_model

    base = load_settings(**over)
    qs = [q for kind in questions(args.per_kind).values() for q in kind[:3]]
    with tempfile.TemporaryDirectory() as tmp, \
            llama_server(prepare_model(args.model, base.cache_dir), "bench", n_ctx=base.n_ctx, timeout=600) as url:
        svc = AssistantService(load_settings(state_dir=Path(tmp), backend="openai", openai_base_url=url,
                                             openai_model="bench", **over))
        svc.load(warm=False)
        rows = []
        for q in qs:
            a = svc.ask(q)
            rows.append({"q": q, "refused": a.refused, "ttft_s": a.timings.get("ttft_ms", 0) / 1000})
            print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
        svc.close()
    answered = [r["ttft_s"] for r in rows if not r["refused"]]
    return {"remote_first_ttft_s": round(answered[0], 2) if answered else None,
            "remote_later_ttft_p50_s": round(statistics.median(answered[1:]), 2) if len(answered) > 1 else None,
            "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--per-kind", type=int, default=8)
    ap.add_argument("--index-dir")
    ap.add_argument("--json")
    ap.add_argument("--remote", action="store_true", help="through a real llama_cpp.server (backend=openai)")
    args = ap.parse_args()
    over = {"model": args.model, **({"index_dir": args.index_dir} if args.index_dir else {})}
    if args.remote:
        out = remote(args, over)
        print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
        return 0
    result: dict = {"model": args.model, "rss_mb_start": round(rss_mb())}
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(state_dir=Path(tmp) / "state", **over)
        svc = AssistantService(settings)
        svc.load(warm=False)
        llm = svc.llm
        assert isinstance(llm, LlamaCppChatModel), "the prefix benchmark is for the llama.cpp engine"
        system = svc.system_prompt()
        # the build into an empty state dir, then a second model object loading it from there
        kv = Path(tmp) / "kv"
        llm.state_dir = kv
        t = time.perf_counter()
        llm.warmup(system)
        result["prefix"] = {"tokens": llm.prefix_info["tokens"], "build_s": round(time.perf_counter() - t, 2)}
        (state,) = kv.glob("prefix-*.kv")
        result["prefix"]["file_mb"] = round(state.stat().st_size / 1e6, 1)
        second = LlamaCppChatModel(llm.path, n_ctx=settings.n_ctx, n_threads=settings.threads, state_dir=kv)
        t = time.perf_counter()
        second.warmup(system)
        result["prefix"]["load_s"] = round(time.perf_counter() - t, 3)
        result["prefix"]["second_start_from"] = second.warmed_from
        second.close()
        result["rss_mb_model"] = round(rss_mb())
        rows = []
        for kind, qs in questions(args.per_kind).items():
            for i, q in enumerate(qs):
                order = [True, False] if i % 2 == 0 else [False, True]
                for on in order:
                    svc.settings.pinned_context = on
                    svc.pins.reset()
                    a = svc.ask(q)
                    extra = llm.last_usage.extra
                    rows.append({"kind": kind, "pinned": on, "q": q, "refused": a.refused,
                                 "ttft_s": a.timings.get("ttft_ms", 0) / 1000,
                                 "prompt_tokens": a.usage.get("prompt_tokens", 0) if a.usage else 0,
                                 "prefilled": extra.get("prefill_tokens"), "decode_tok_s": extra.get("decode_tok_s")})
                    print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
        result["rss_mb_end"] = round(rss_mb())
        svc.close()
    table = {}
    for kind in ("article", "docs"):
        for on in (True, False):
            sel = [r for r in rows if r["kind"] == kind and r["pinned"] == on and not r["refused"]]
            table[f"{kind}/{'pinned' if on else 'retrieval only'}"] = {
                "n": len(sel), "ttft_p50_s": round(pct([r["ttft_s"] for r in sel], 0.5), 2),
                "ttft_p95_s": round(pct([r["ttft_s"] for r in sel], 0.95), 2),
                "prompt_tokens_p50": statistics.median([r["prompt_tokens"] for r in sel]) if sel else None,
                "prefilled_p50": statistics.median([r["prefilled"] or 0 for r in sel]) if sel else None,
                "decode_tok_s_p50": round(pct([r["decode_tok_s"] for r in sel], 0.5), 1)}
    result["table"] = table
    for kind in ("article", "docs"):
        on, off = table[f"{kind}/pinned"], table[f"{kind}/retrieval only"]
        if on["ttft_p50_s"] and off["ttft_p50_s"]:
            result.setdefault("ratios", {})[kind] = {
                "ttft_p50_pinned_over_retrieval": round(on["ttft_p50_s"] / off["ttft_p50_s"], 2),
                "decode_pinned_over_retrieval": round(on["decode_tok_s_p50"] / off["decode_tok_s_p50"], 2)}
    print(json.dumps({k: v for k, v in result.items()}, ensure_ascii=False, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps({**result, "rows": rows}, ensure_ascii=False, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
