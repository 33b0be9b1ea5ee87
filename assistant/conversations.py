"""Regenerating and editing the last turn, and the alternatives an answer keeps.

An answer's `extra` (the session store's JSON column) holds, once it has been regenerated or its question
edited, `alternatives`: every version of the turn in the order they were written ({question, answer,
citations, refused, stopped}), and `chosen`: the index of the one shown (the message's own content). The user
can switch back to any version (`choose`); the turn keeps its place and its message id throughout.
A regenerated answer samples at a higher temperature each time (`regen_temperature`), so it differs from the
answers before it though the engine's seed is fixed.
"""
from __future__ import annotations

from typing import Any

from .errors import UserError
from .sessions import SessionStorage, unknown_session

VERSION_KEYS = ("question", "answer", "citations", "refused", "stopped")
MAX_ALTERNATIVES = 10  # versions kept per turn (the oldest go first)


def nothing_to_regenerate() -> UserError:
    return UserError("no_turn", "This conversation has no answer to regenerate yet.", "该会话还没有可以重新生成的回答。",
                     409)


def regen_temperature(base: float, versions: int) -> float:
    """The temperature of the `versions`-th regeneration of a turn (1, 2, ...)."""
    return min(1.2, max(base, 0.6) + 0.1 * versions)


def versions(last: dict[str, Any]) -> list[dict[str, Any]]:
    """The turn's versions so far (the message itself when it has never been regenerated)."""
    extra = last["extra"]
    if extra.get("alternatives"):
        return list(extra["alternatives"])
    return [{"question": last["question"], "answer": last["answer"], "citations": extra.get("citations", []),
             "refused": bool(extra.get("refused")), "stopped": bool(extra.get("stopped"))}]


def with_new_version(last: dict[str, Any], question: str, answer: str, extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` of a new version of the turn `last` (its store row), keeping the versions before it."""
    new = {"question": question, "answer": answer, **{k: extra.get(k) for k in VERSION_KEYS[2:]}}
    alts = (versions(last) + [new])[-MAX_ALTERNATIVES:]
    return {**extra, "alternatives": alts, "chosen": len(alts) - 1}


def choose(store: SessionStorage, session_id: str, index: int, owner: str | None,
           client: str | None = None) -> dict[str, Any]:
    """Show version `index` of the session's last turn again; returns that version."""
    if not store.exists(session_id, owner, client):
        raise unknown_session()
    last = store.last_turn(session_id)
    if last is None:
        raise nothing_to_regenerate()
    alts = versions(last)
    if not 0 <= index < len(alts):
        raise UserError("bad_alternative", f"This answer has versions 0 to {len(alts) - 1}.",
                        f"该回答的版本编号为 0 到 {len(alts) - 1}。", 422)
    version = alts[index]
    extra = {**last["extra"], **{k: version.get(k) for k in VERSION_KEYS[2:]}, "alternatives": alts,
             "chosen": index}
    store.replace_turn(session_id, last["answer_id"], version["question"], version["answer"], extra)
    return {**version, "index": index, "count": len(alts), "message_id": last["answer_id"]}
