"""The pinned documents: which documents are always in the model's context (the user's pins, stored in the state
directory; by default the reference article), their `PinnedContext` built from the live index's passages once per
(index generation, pins, budget), the one a question in each language reads (its twin, answering/twin.py, when the
documents are in the other language), and pinning or unpinning within the token budget (answer/pinned.py builds the
context and its prefix text)."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..answer import pinned as pinning
from ..answer.prompt import SYSTEM_PROMPT
from ..errors import UserError
from ..index.snapshot import IndexSnapshot as Snapshot
from ..settings import Settings
from .twin import LANGUAGES, Twins

log = logging.getLogger(__name__)


class Pins:
    def __init__(self, settings: Settings, snapshot: Callable[[], Snapshot], count_tokens: Callable[[str], int],
                 documents: Callable[[], list[dict[str, Any]]], changed: Callable[[], None],
                 twins: Twins | None = None) -> None:
        """`snapshot()`: the live index generation; `count_tokens`: the model's; `documents()`: every document (id,
        source, name); `changed()`: called once the pins changed (the service computes the new prefix); `twins`: the
        translations of the pinned passages (None: questions in either language read the documents as they are)."""
        self.settings = settings
        self.twins = twins
        self._snapshot = snapshot
        self._count_tokens = count_tokens
        self._documents = documents
        self._changed = changed
        self._built: tuple[tuple[Any, ...], pinning.PinnedContext] | None = None  # (its key, the pinned context)

    def context(self, snap: Snapshot | None = None, lang: str = "", build: bool = True) -> pinning.PinnedContext:
        """The documents always in the model's context, made of `snap`'s passages (default the live generation);
        for a question in `lang`, their twin in that language when they are in the other one (settings.pinned_twin;
        `build=False`: only a twin whose translations are already made, answering/twin.py).
        Pins that no longer fit the budget (it was lowered) are left out from the last one, with a log line."""
        ctx = self._context(snap)
        if lang and self.twins is not None and self.settings.pinned_twin:
            return self.twins.of(ctx, lang, build)
        return ctx

    def prefixes(self) -> list[str]:
        """Every system message a fact answer may start with: the twins' (for the question languages the pinned
        documents are not in), then the documents' own (or the plain rules): what a server makes cached prefixes."""
        ctx = self._context(None)
        twins = (self.context(None, lang).system for lang in LANGUAGES)  # the documents themselves where none is needed
        return [*dict.fromkeys(t for t in twins if t != ctx.system), ctx.system or SYSTEM_PROMPT]

    def _context(self, snap: Snapshot | None) -> pinning.PinnedContext:
        if not self.settings.pinned_context:
            return pinning.NONE
        snap = snap or self._snapshot()  # an answer passes the generation it retrieved from
        chosen = pinning.load_pins(self.settings.state_dir)
        chunks = snap.chunks
        if chosen is None:
            chosen = pinning.default_pins(chunks)
        key = (snap.location, tuple(chosen), self.settings.pinned_token_budget)
        built = self._built
        if built is not None and built[0] == key:
            return built[1]
        while True:
            try:
                ctx = pinning.build(chunks, chosen, self._count_tokens, self.settings.pinned_token_budget)
                break
            except UserError:
                log.warning("pinned documents over the budget of %d tokens: %s left out",
                            self.settings.pinned_token_budget, chosen[-1])
                chosen = chosen[:-1]
        self._built = (key, ctx)
        return ctx

    def reset(self) -> None:
        """Forget the built context (the next answer builds it again)."""
        self._built = None

    def system_prompt(self) -> str:
        """The system message every fact answer starts with: the pinned context, or the plain rules without one."""
        return self.context().system or SYSTEM_PROMPT

    def sources(self, snap: Snapshot) -> set[str]:
        """The pinned documents' sources, without building the context."""
        if not self.settings.pinned_context:
            return set()
        if self._built is not None:
            return set(self._built[1].sources)
        return set(pinning.load_pins(self.settings.state_dir) or pinning.default_pins(snap.chunks))

    def info(self) -> dict[str, Any]:
        """What is pinned: the sources, their passages and tokens, the budget."""
        ctx = self.context()
        return {"enabled": self.settings.pinned_context, "sources": list(ctx.sources), "passages": ctx.k,
                "tokens": ctx.tokens, "budget": self.settings.pinned_token_budget}

    def _source_of(self, ref: str) -> str:
        """A document's source path from its id, source or name (as the document list gives them)."""
        for d in self._documents():
            if ref in (d["id"], d["source"], d["name"]):
                return str(d["source"])
        raise UserError("unknown_document", f"No document {ref!r} in the index.", f"索引中没有文档 {ref!r}。", 404)

    def set(self, refs: list[str]) -> dict[str, Any]:
        """Pin exactly these documents (ids, sources or names; [] pins none). A 404 for an unknown document, a 409
        when they do not fit the budget together; nothing changes then."""
        if not self.settings.pinned_context:
            raise UserError("pinning_off", "Pinned context is off (setting pinned_context).",
                            "置顶上下文已关闭（设置项 pinned_context）。", 409)
        sources = list(dict.fromkeys(self._source_of(r) for r in refs))
        pinning.build(self._snapshot().chunks, sources, self._count_tokens, self.settings.pinned_token_budget)
        pinning.save_pins(self.settings.state_dir, sources)
        self._built = None
        self._changed()
        return self.info()

    def pin(self, ref: str) -> dict[str, Any]:
        return self.set([*self.context().sources, ref])

    def unpin(self, ref: str) -> dict[str, Any]:
        source = self._source_of(ref)
        return self.set([s for s in self.context().sources if s != source])
