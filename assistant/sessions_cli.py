"""`assistant sessions list|show|export|delete`: the conversations of this state directory (or of
ASSISTANT_DATABASE_URL) from the command line, through the same AssistantService methods as the UI's history
list and the /api/sessions routes. The CLI is the keyless local user (owner None): it sees every session."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from . import export
from .errors import UserError
from .sessions import unknown_session
from .settings import settings_from_args


def _service(args: argparse.Namespace) -> Any:
    from .service import AssistantService

    if args.state_dir:
        args.state_dir = str(Path(args.state_dir))
    return AssistantService(settings_from_args(args))  # opens the session store only: no index or model is loaded


def _session(svc: Any, session_id: str) -> dict[str, Any]:
    data = svc.get_session(session_id)
    if data is None:
        raise unknown_session()
    return data


def cmd_sessions(args: argparse.Namespace) -> int:
    svc = _service(args)
    try:
        if args.action == "list":
            rows = svc.list_sessions(args.search or "", args.limit)
            if args.json:
                print(json.dumps(rows, ensure_ascii=False, indent=2))
            for r in [] if args.json else rows:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["updated"]))
                print(f"{r['id']}  {when}  {r['turns']:>3} turns  {r['title']}")
            return 0
        if not args.session_id:
            raise UserError("no_session_id", f"`sessions {args.action}` needs a session id.",
                            f"`sessions {args.action}` 需要会话 id。")
        if args.action == "delete":
            if not svc.delete_session(args.session_id):
                raise unknown_session()
            print(f"deleted {args.session_id}")
            return 0
        data = _session(svc, args.session_id)
        fmt = "json" if args.action == "show" and args.json else args.format
        text = export.to_json(data) if fmt == "json" else export.to_markdown(data, args.lang)
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
            print(f"wrote {args.out}", file=sys.stderr)
        else:
            print(text)
        return 0
    finally:
        svc.sessions.close()


def add_parser(sub: Any) -> None:
    s = sub.add_parser("sessions", help="conversations: list (newest first, --search), show, export, delete")
    s.add_argument("action", choices=["list", "show", "export", "delete"])
    s.add_argument("session_id", nargs="?", help="the session (show, export, delete)")
    s.add_argument("--state-dir", help="state directory (env ASSISTANT_STATE_DIR; default ./state)")
    s.add_argument("--search", help="list: only conversations whose title or a message contains this text")
    s.add_argument("--limit", type=int, default=50, help="list: at most this many (default 50)")
    s.add_argument("--format", choices=list(export.FORMATS), default="markdown",
                   help="export: Markdown with citations as footnotes (default) or JSON")
    s.add_argument("--lang", choices=["zh", "en"], default="zh", help="labels of the Markdown (default zh)")
    s.add_argument("--out", help="export: write to this file instead of standard output")
    s.add_argument("--json", action="store_true", help="list/show: JSON")
    s.set_defaults(func=cmd_sessions, index_dir=None, model=None, backend=None, embedder=None)
