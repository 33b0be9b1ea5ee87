"""`assistant sessions list|show|export|delete` on a real SQLite state directory (no index or model needed):
the same list, export and delete as the UI's history and the /api/sessions routes."""
from __future__ import annotations

import json
from pathlib import Path

from assistant.cli import main
from assistant.sessions import SessionStore


def test_sessions_cli_lists_shows_exports_and_deletes(tmp_path: Path, capsys) -> None:
    state = tmp_path / "state"
    store = SessionStore(state / "assistant.db")
    old = store.ensure(None, None, "browser-cli-0001")
    store.add_turn(old, "DeepSpeed 的 ZeRO 是什么？", "ZeRO 切分优化器状态 [1]。", {"citations": [
        {"n": 1, "title": "DeepSpeed notes", "source": "corpus/notes/deepspeed.md", "lines": [27, 30],
         "url": "https://example.org/ds#L27"}]})
    new = store.ensure(None)
    store.add_turn(new, "What is JAX good for?", "Research.", {"citations": []})
    store.close()
    assert main(["sessions", "list", "--state-dir", str(state)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == [new, old] and "DeepSpeed 的 ZeRO" in lines[1]
    assert main(["sessions", "list", "--state-dir", str(state), "--search", "zero", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [old]
    assert main(["sessions", "export", old, "--state-dir", str(state), "--lang", "en"]) == 0
    md = capsys.readouterr().out
    assert "**Q:** DeepSpeed 的 ZeRO 是什么？" in md and "ZeRO 切分优化器状态 [^1]。" in md
    assert "[^1]: DeepSpeed notes — `corpus/notes/deepspeed.md`, lines 27–30 <https://example.org/ds#L27>" in md
    out = tmp_path / "c.json"
    assert main(["sessions", "export", old, "--state-dir", str(state), "--format", "json", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["messages"][1]["citations"][0]["lines"] == [27, 30]
    assert main(["sessions", "show", old, "--state-dir", str(state), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == old
    assert main(["sessions", "delete", old, "--state-dir", str(state)]) == 0
    assert main(["sessions", "delete", old, "--state-dir", str(state)]) == 2
    assert "Unknown session" in capsys.readouterr().err
    assert main(["sessions", "show", "--state-dir", str(state)]) == 2
