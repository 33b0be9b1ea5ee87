"""The Gradio chat (its page is laid out and mounted at / by ui/page.py). It calls AssistantService in-process, like
the API.

Owns: the chat tab's handlers and what they show (streamed answers, a sources panel that fills as soon as
retrieval is done, [n] links that open their passage, a status line with timings, thumbs up/down) and the
interface texts in zh and en (TEXT).
Retrieved text and model output are data: sources are HTML-escaped, and chat text (model output and the
question) is made inert Markdown (`inert`): no raw HTML, images or links but the [n] citations. The one other
link is ours: a source entry's link to its upstream page (an https URL the sync wrote from corpus/sources.yaml). Each handler takes
the Gradio request and asks ui/auth.py who sent it (the login cookie), so a chat's session is its key's, as in the API.
"""
from __future__ import annotations

import html
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # offline: no telemetry calls

import gradio as gr

from assistant.errors import UserError
from assistant.service import AssistantService
from assistant.text import citation_marks
from assistant.types import Answer, Chunk, Citation, Hit

from .advisor_tab import advice_footer
from .auth import Access
from .history_text import EN_EXTRA, ZH_EXTRA

log = logging.getLogger("ui.web")

TEXT: dict[str, dict[str, str]] = {
    "zh": {"title": "## 框架选型助手 · Framework Advisor\n基于本地文档回答 AI 训练框架选型问题，每句话都标注来源。",
           "chat_tab": "问答", "advisor_tab": "选型顾问", "question": "你的问题",
           "placeholder": "例如：PyTorch 和 TensorFlow 哪个更适合做研究？", "send": "发送", "new": "新对话",
           "up": "▲ 有帮助", "down": "▼ 没帮助", "sources": "### 来源", "chatbot": "对话", "examples": "示例问题",
           "retrieving": "检索中…", "waiting_previous": "等上一个回答停下后再回答这个问题…", "generating": "生成中…", "checking": "核对引用中…", "ready": "就绪。",
           "done": "完成 · 检索 {r:.0f} ms · 首字 {f:.0f} ms · 总计 {t:.1f} s",
           "no_sources": "没有检索到相关来源。", "loading": "助手正在加载模型，请稍后重试。",
           "error": "出错了：{m}", "internal": "服务器内部错误，请稍后重试。",
           "fb_saved": "已记录你的反馈，谢谢！", "fb_none": "还没有可以评价的回答。",
           "lines": "行", "score": "相关度", "cited": "已引用", "lang": "界面语言", "licence": "许可",
           "queued": "排队中：前面还有 {n} 个请求…", "stopped": "已停止", "stopped_mark": "\n\n*（已停止）*",
           "version": " · 第 {n} 版", **ZH_EXTRA},
    "en": {"title": "## Framework Advisor · 框架选型助手\nCited answers about choosing an AI training framework, "
                    "from local documents.",
           "chat_tab": "Chat", "advisor_tab": "Advisor", "question": "Your question",
           "placeholder": "e.g. Which framework suits research, PyTorch or TensorFlow?", "send": "Send",
           "new": "New chat", "up": "▲ Helpful", "down": "▼ Not helpful", "sources": "### Sources",
           "chatbot": "Conversation", "examples": "Example questions", "retrieving": "Retrieving…",
           "waiting_previous": "Waiting for the previous answer to stop, then answering this one…",
           "generating": "Generating…", "checking": "Checking citations…", "ready": "Ready.",
           "done": "Done · retrieval {r:.0f} ms · first token {f:.0f} ms · total {t:.1f} s",
           "no_sources": "No relevant sources found.", "loading": "The assistant is still loading its model; "
           "please retry in a moment.", "error": "Error: {m}", "internal": "Internal error; please retry.",
           "fb_saved": "Feedback saved, thank you!", "fb_none": "No answer to rate yet.",
           "lines": "lines", "score": "score", "cited": "cited", "lang": "Interface language", "licence": "licence",
           "queued": "Waiting in queue: {n} ahead…", "stopped": "Stopped", "stopped_mark": "\n\n*(stopped)*",
           "version": " · version {n}", **EN_EXTRA},
}

EXAMPLES = [
    ["PyTorch 和 TensorFlow 哪个更适合做研究？"],
    ["DeepSpeed 的 ZeRO 是什么？"],
    ["飞桨适合什么场景？"],
    ["Which framework is best for training very large models on many GPUs?"],
    ["What is JAX good for?"],
]

CSS = """
#fa-sources details { border: 1px solid var(--border-color-primary); border-radius: 6px; padding: 6px 10px;
  margin-bottom: 6px; }
#fa-sources details.fa-cited summary b { color: var(--color-accent); }
#fa-sources details.fa-flash { outline: 3px solid var(--color-accent); }
#fa-sources .fa-meta { font-size: 0.85em; opacity: 0.8; margin: 4px 0; word-break: break-all; }
#fa-sources .fa-text { white-space: pre-wrap; font-size: 0.9em; }
a.fa-cite { text-decoration: none; font-weight: 600; }
"""

# [n] links (chat and Advisor): open the passage's <details> and scroll to it (capture phase, so the
# chat's own link handling, which would open a new tab, never sees the click).
HEAD = """<script>
(function () {
  function openSource(id) {
    var el = document.getElementById(id);
    if (!el) return;
    for (var p = el.parentElement; p; p = p.parentElement) { if (p.tagName === 'DETAILS') p.open = true; }
    el.open = true;
    el.classList.add('fa-flash');
    el.scrollIntoView({behavior: 'smooth', block: 'center'});
    setTimeout(function () { el.classList.remove('fa-flash'); }, 2000);
  }
  document.addEventListener('click', function (e) {
    // chat citations (#src-n) and Advisor citations (#adv-cite-n) open their passage the same way
    var a = e.target && e.target.closest ? e.target.closest('a[href^="#src-"], a[href^="#adv-cite-"]') : null;
    if (!a) return;
    e.preventDefault();
    e.stopPropagation();
    openSource(a.getAttribute('href').slice(1));
  }, true);
})();
</script>"""

# Characters Markdown builds links, images, code and autolinks from, as numeric entities: the chat's Markdown
# renderer shows them as the same characters but never parses them as syntax.
_MD_ENTITIES = str.maketrans({"[": "&#91;", "]": "&#93;", "(": "&#40;", ")": "&#41;", "!": "&#33;",
                              "`": "&#96;", "\\": "&#92;", "@": "&#64;", "$": "&#36;"})
# "scheme:" and "www." start GFM autolinks (https://x, www.x) and dangerous URLs (javascript:, data:)
_AUTOLINK = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{1,20}):|\b(www)\.")


def inert(text: str) -> str:
    """Untrusted text (model output, a question) as chat Markdown that renders as plain text: no raw HTML, no
    links, images, autolinks or code spans, whatever the text says. Emphasis and line breaks still render."""
    out = html.escape(text).translate(_MD_ENTITIES)
    return _AUTOLINK.sub(lambda m: f"{m.group(1)}&#58;" if m.group(1) else "www&#46;", out)


def link_citations(text: str) -> str:
    """The answer made inert (see `inert`), with each [n] a link to its source panel entry: the only links."""
    out, at = [], 0
    for m in citation_marks(text):
        out += [inert(text[at:m.start()]), f'<a class="fa-cite" href="#src-{m.group(1)}">[{m.group(1)}]</a>']
        at = m.end()
    return "".join(out + [inert(text[at:])])


def messages_to_chat(session: dict[str, Any], lang: str) -> list[dict[str, str]]:
    """A stored session as the chatbot's messages (as answers are rendered while streaming)."""
    out = []
    for m in session["messages"]:
        if m["role"] == "user":
            out.append({"role": "user", "content": inert(m["content"])})
        else:
            mark = TEXT[lang]["stopped_mark"] if m.get("stopped") else ""
            out.append({"role": "assistant", "content": link_citations(m["content"]) + mark})
    return out


def provenance_html(c: Chunk, t: dict[str, str]) -> str:
    """Where a passage comes from: its path (a link to the upstream page at its pinned commit when it has one),
    publisher and date (the article), licence. Every value is escaped; only an https URL becomes a link."""
    where = html.escape(c.source)
    if c.url.startswith("https://"):
        where = (f'<a class="fa-upstream" href="{html.escape(c.url, quote=True)}" target="_blank" '
                 f'rel="noopener noreferrer nofollow">{where}</a>')
    parts = [where, *(html.escape(x) for x in (c.publisher, c.date) if x)]
    if c.licence:
        parts.append(f"{t['licence']}: {html.escape(c.licence)}")
    return " · ".join(parts)


def _source_entry(n: int, c: Chunk, score: float | None, cited: bool, t: dict[str, str]) -> str:
    """One sources-panel entry: `<details id="src-n">` (what [n] opens), its provenance, lines and passage."""
    where = provenance_html(c, t)
    if c.kind == "upload":  # one of the user's uploaded documents (ui/documents_tab.py)
        where = '<span class="fa-mine">我的文档 / my document</span> · ' + where
    path = " › ".join(html.escape(p) for p in c.heading_path if p != c.title)
    mark = f" · {t['cited']}" if cited else ""
    snippet = html.escape(c.text if len(c.text) <= 900 else c.text[:900] + "…")
    score_text = f" · {t['score']} {score:.3f}" if score is not None else ""
    return (f'<details id="src-{n}" class="fa-src{" fa-cited" if cited else ""}">'
            f"<summary><b>[{n}]</b> {html.escape(c.title)}{' — ' + path if path else ''}{mark}</summary>"
            f'<div class="fa-meta">{where} · {t["lines"]} {c.lines[0]}–{c.lines[1]}{score_text}</div>'
            f'<div class="fa-text">{snippet}</div></details>')


def sources_html(hits: list[Hit], lang: str, citations: list[Citation] | None = None) -> str:
    t = TEXT[lang]
    if not hits:
        return f"<p>{t['no_sources']}</p>"
    cited = {c.n for c in citations or []}
    return "\n".join(_source_entry(n, h.chunk, h.score, n in cited, t) for n, h in enumerate(hits, 1))


def stored_sources_html(citations: list[dict[str, Any]], lang: str,
                        passage: Callable[[str], Chunk | None]) -> str:
    """The sources panel of a stored answer (a conversation reopened from the history list): each passage the
    answer cites, under its own [n], the passage's text from the index (`passage`, service.passage) while it
    holds it, else what the citation recorded (its snippet). The retrieval scores are not stored: none shown."""
    t = TEXT[lang]
    out = []
    for c in sorted(citations or [], key=lambda c: c["n"]):
        chunk = passage(c["chunk_id"]) or Chunk(
            id=c["chunk_id"], text=c.get("snippet", ""), source=c["source"], title=c.get("title", ""),
            heading_path=tuple(c.get("heading_path") or ()), language="", frameworks=(),
            lines=(int(c["lines"][0]), int(c["lines"][1])), url=c.get("url", ""), licence=c.get("licence", ""),
            publisher=c.get("publisher", ""), date=c.get("date", ""))
        out.append(_source_entry(int(c["n"]), chunk, None, True, t))
    return "\n".join(out) if out else f"<p>{t['no_sources']}</p>"


def status_done(answer: Answer, lang: str) -> str:
    tm, t = answer.timings, TEXT[lang]
    done = t["done"].format(r=tm.get("retrieval_ms", 0), f=tm.get("ttft_ms", 0), t=tm.get("total_ms", 0) / 1000)
    return (t["stopped"] + " · " + done if answer.stopped else done) + (
        t["version"].format(n=answer.alternatives) if answer.alternatives else "")


class ChatHandlers:
    """The UI's event handlers; each is a thin call into the service."""

    def __init__(self, service: AssistantService, access: Access | None = None) -> None:
        self.service = service
        self.access = access

    def owner(self, request: gr.Request | None) -> str | None:
        """The sender's owner id; a keyed app without a login here (the middleware lets none through) refuses."""
        if self.access is None or not self.access.enabled:
            return None
        headers = {k.lower(): v for k, v in dict(getattr(request, "headers", None) or {}).items()}
        allowed, owner = self.access.owner_of(headers)
        if not allowed:
            raise UserError("unauthorized", "Please sign in again (/login).", "请重新登录（/login）。", 401)
        return owner

    def respond(self, question: str, history: list[dict[str, Any]], session_id: str, lang: str,
                client: str = "", editing: bool = False, request: gr.Request | None = None) -> Iterator[tuple]:
        """Ask `question` in the session (a new one, listed for the browser `client`, when there is none);
        `editing`: it replaces the last question (service.regenerate_stream), as the edit button asks."""
        history = list(history or [])
        if not (question or "").strip():
            yield history, gr.skip(), gr.skip(), session_id, gr.skip(), gr.skip()
            return
        editing = bool(editing and session_id and len(history) >= 2)
        if editing:
            history = history[:-2]
        history += [{"role": "user", "content": inert(question)}, {"role": "assistant", "content": "…"}]
        yield from self._answer(history, session_id, lang, request, question, editing, client)

    def regenerate(self, history: list[dict[str, Any]], session_id: str, lang: str, client: str = "",
                   request: gr.Request | None = None) -> Iterator[tuple]:
        """The last answer again, as a new version (the earlier ones stay, see ui/history.py's versions)."""
        history = list(history or [])
        if not session_id or len(history) < 2:
            yield history, gr.skip(), TEXT[lang]["fb_none"], session_id, gr.skip(), gr.skip()
            return
        history[-1] = {"role": "assistant", "content": "…"}
        yield from self._answer(history, session_id, lang, request, None, True, client)

    def _answer(self, history: list[dict[str, Any]], session_id: str, lang: str, request: gr.Request | None,
                question: str | None, replace: bool, client: str) -> Iterator[tuple]:
        t = TEXT[lang]
        if not self.service.ready():
            history[-1]["content"] = t["loading"]
            yield history, gr.skip(), t["loading"], session_id, gr.skip(), ""
            return
        hits: list[Hit] = []
        raw = ""
        try:
            owner = self.owner(request)
            # the session exists before the answer starts: the stop button names it
            session_id = session_id or self.service.new_session(owner=owner, client=client or None)
            # a question sent while the session's answer is still being written or stopped waits for it (the
            # service answers a session's questions in order); the chat is redrawn from the store once the answer
            # starts, whether it waited or not: the chat this question was sent with may hold the previous answer
            # as it was streaming (a stop that was saved in between shows its mark only in the store)
            waiting = self.service.answering(session_id)
            yield history, "", t["waiting_previous" if waiting else "retrieving"], session_id, "", ""
            ticket = self.service.admit()
            events = (self.service.regenerate_stream(session_id, question, ticket, owner=owner,
                                                     client=client or None) if replace else
                      self.service.ask_stream(question or "", session_id, None, ticket, owner=owner))
            for ev in events:
                if ev.kind == "sources":
                    hits = ev.data
                    if len(history) > 2:
                        stored = self.service.get_session(session_id, owner=owner, client=client or None)
                        before = messages_to_chat(stored, lang) if stored else history[:-2]
                        history = (before[:-2] if replace else before) + history[-2:]
                    ahead = self.service.queue_position(ticket)
                    yield (history, sources_html(hits, lang), t["queued"].format(n=ahead) if ahead else
                           t["generating"], session_id, "", "")
                elif ev.kind == "token":
                    first = not raw
                    raw += ev.data
                    history[-1]["content"] = inert(raw)
                    yield history, gr.skip(), t["generating"] if first else gr.skip(), session_id, gr.skip(), gr.skip()
                elif ev.kind == "status":  # the model is done; the citation check runs
                    yield history, gr.skip(), t["checking"], session_id, gr.skip(), gr.skip()
                elif ev.kind == "done":
                    ans: Answer = ev.data
                    history[-1]["content"] = (link_citations(ans.answer) + (t["stopped_mark"] if ans.stopped else "")
                                              + advice_footer(ans.advice, lang))
                    yield (history, sources_html(hits, lang, ans.citations), status_done(ans, lang),
                           ans.session_id, ans.message_id, "")
        except UserError as exc:
            history[-1]["content"] = "⚠ " + exc.message(lang)
            yield history, gr.skip(), t["error"].format(m=exc.message(lang)), session_id, gr.skip(), gr.skip()
        except Exception:
            log.exception("chat failed")
            history[-1]["content"] = "⚠ " + t["internal"]
            yield history, gr.skip(), t["error"].format(m=t["internal"]), session_id, gr.skip(), gr.skip()

    def rate(self, rating: str, session_id: str, message_id: str, lang: str, request: gr.Request | None = None) -> str:
        t = TEXT[lang]
        if not session_id or not message_id:
            return t["fb_none"]
        try:
            self.service.feedback(session_id, message_id, rating, owner=self.owner(request))
        except UserError as exc:
            return t["error"].format(m=exc.message(lang))
        return t["fb_saved"]
