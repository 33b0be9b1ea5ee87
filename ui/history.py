"""The chat's conversation controls (Gradio): the history list (`fa-history`, with search, rename and delete),
stop (`fa-stop`, shown while an answer streams), regenerate (`fa-regenerate`) and edit-last-question
(`fa-edit`), the answer's versions (`fa-versions`), export (`fa-export`: Markdown with footnotes; JSON) and
copy-one-answer (`fa-copy`), and what the page does on load: the browser's id (localStorage `fa-client`, the
client whose list shows its conversations) and, on the first visit, the interface language from the browser's.

Every action is one AssistantService call (the same the /api/sessions routes make, ui/sessions_api.py), with
the sender's owner id from ui/web.py's ChatHandlers.owner. Stored text is shown as ui/web.py shows answers:
inert, with [n] links only.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import gradio as gr

from assistant import export
from assistant.errors import UserError

from .web import TEXT, ChatHandlers, messages_to_chat, stored_sources_html

# on load: the browser's id (made once, kept in localStorage) and the interface language (saved choice, else the
# browser's language on the first visit)
_CLIENT_ID = """(() => {
  let id = localStorage.getItem('fa-client');
  if (!id) {
    id = 'b' + (window.crypto && crypto.randomUUID ? crypto.randomUUID().replace(/-/g, '')
                : Math.random().toString(16).slice(2) + Date.now().toString(16));
    localStorage.setItem('fa-client', id);
  }
  return id;
})()"""
LOAD_JS = """() => {
  const id = """ + _CLIENT_ID + """;
  const saved = localStorage.getItem('fa-lang');
  const lang = saved || ((navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en');
  return [id, lang];
}"""
# an answer sent before the page's load event has run still names its browser (the first step of a send)
CLIENT_JS = "(c) => c || " + _CLIENT_ID
SAVE_LANG_JS = "(lang) => { localStorage.setItem('fa-lang', lang); return lang; }"
FOCUS_JS = "() => { const b = document.querySelector('#fa-question textarea'); if (b) b.focus(); }"
COPY_JS = "(text) => { if (text && navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {}); return text; }"
EXPORT_DIR = Path(tempfile.gettempdir()) / "framework-advisor-exports"

CSS = """
#fa-history-col { min-width: 220px; }
#fa-history .wrap { flex-direction: column; align-items: stretch; max-height: 420px; overflow-y: auto; }
#fa-history label { width: 100%; }
@media (max-width: 700px) {
  #fa-header { flex-wrap: wrap; }
  #fa-header > div { min-width: 100% !important; }
  #fa-chat-row { flex-direction: column; }
  #fa-chat-row > div { width: 100% !important; min-width: 0 !important; }
  #fa-history .wrap { max-height: 180px; }
}
"""


class HistoryHandlers:
    def __init__(self, chat: ChatHandlers) -> None:
        self.chat = chat
        self.service = chat.service

    def _owner(self, request: gr.Request | None) -> str | None:
        return self.chat.owner(request)

    def listing(self, client: str, text: str, session_id: str, request: gr.Request | None = None) -> Any:
        rows = self.service.list_sessions(text or "", 100, owner=self._owner(request), client=client or None)
        choices = [(f"{r['title'] or '…'} · {time.strftime('%m-%d %H:%M', time.localtime(r['updated']))}", r["id"])
                   for r in rows]
        return gr.update(choices=choices, value=session_id if any(c[1] == session_id for c in choices) else None)

    def _session(self, session_id: str, client: str, request: gr.Request | None) -> dict[str, Any] | None:
        """The stored session when it is this key's and this browser's (else None, as for an unknown id)."""
        if not session_id:
            return None
        return self.service.get_session(session_id, owner=self._owner(request), client=client or None)

    def open(self, session_id: str, lang: str, client: str = "", request: gr.Request | None = None) -> tuple:
        t = TEXT[lang]
        if not session_id:
            return gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip(), gr.skip()
        data = self._session(session_id, client, request)
        if data is None:
            return [], "", t["error"].format(m=t["no_session"]), "", "", gr.update(visible=False)
        answers = [m for m in data["messages"] if m["role"] == "assistant"]
        return (messages_to_chat(data, lang), self.last_sources(data, lang), t["opened"], session_id,
                answers[-1]["id"] if answers else "", self.versions(session_id, client, request))

    def last_sources(self, session: dict[str, Any], lang: str) -> str:
        """The sources panel of the session's last answer (as it showed right after answering: what it cites)."""
        answers = [m for m in session["messages"] if m["role"] == "assistant"]
        return stored_sources_html(answers[-1].get("citations") or [], lang, self.service.passage) if answers else ""

    def versions(self, session_id: str, client: str = "", request: gr.Request | None = None) -> Any:
        """The versions radio of the last answer: shown when it has more than one."""
        data = self._session(session_id, client, request)
        last = data["messages"][-1] if data and data["messages"] else {}
        alts = last.get("alternatives") or []
        if len(alts) < 2:
            return gr.update(visible=False, choices=[], value=None)
        return gr.update(visible=True, choices=[(str(i + 1), i) for i in range(len(alts))],
                         value=last.get("chosen", len(alts) - 1))

    def choose(self, index: Any, session_id: str, lang: str, client: str = "",
               request: gr.Request | None = None) -> tuple:
        if index is None or not session_id:
            return gr.skip(), gr.skip(), gr.skip()
        try:
            self.service.choose_version(session_id, int(index), owner=self._owner(request), client=client or None)
        except UserError as exc:
            return gr.skip(), gr.skip(), TEXT[lang]["error"].format(m=exc.message(lang))
        data = self._session(session_id, client, request) or {"messages": []}
        return (messages_to_chat(data, lang), self.last_sources(data, lang),
                TEXT[lang]["version"].format(n=int(index) + 1).strip(" ·"))

    def rename(self, session_id: str, title: str, lang: str, client: str = "",
               request: gr.Request | None = None) -> tuple:
        t = TEXT[lang]
        if not session_id:
            return t["no_session"], gr.skip()
        try:
            self.service.rename_session(session_id, title or "", owner=self._owner(request), client=client or None)
        except UserError as exc:
            return t["error"].format(m=exc.message(lang)), gr.skip()
        return t["renamed"], ""

    def delete(self, session_id: str, lang: str, client: str = "", request: gr.Request | None = None) -> tuple:
        t = TEXT[lang]
        if not session_id:
            return gr.skip(), gr.skip(), t["no_session"], gr.skip(), gr.skip()
        if not self.service.delete_session(session_id, owner=self._owner(request), client=client or None):
            return gr.skip(), gr.skip(), t["error"].format(m=t["no_session"]), gr.skip(), gr.skip()
        return [], "", t["deleted"], "", ""

    def stop(self, session_id: str, lang: str, client: str = "", request: gr.Request | None = None) -> str:
        if session_id:
            try:
                self.service.cancel(session_id, owner=self._owner(request), client=client or None)
            except UserError:
                pass
        return TEXT[lang]["stopping"]

    def export_file(self, session_id: str, fmt: str, lang: str, client: str = "",
                    request: gr.Request | None = None) -> Any:
        data = self._session(session_id, client, request)
        if data is None:
            return gr.update(value=None, visible=False)
        text, _media, name = export.export(data, fmt, lang)
        EXPORT_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = EXPORT_DIR / f"{session_id[:8]}-{int(time.time() * 1000)}" / name
        path.parent.mkdir(mode=0o700)
        path.write_text(text, encoding="utf-8")
        return gr.update(value=str(path), visible=True)

    def copy_text(self, session_id: str, message_id: str, lang: str, client: str = "",
                  request: gr.Request | None = None) -> tuple:
        data = self._session(session_id, client, request)
        text = export.answer_markdown(data, message_id, lang) if data and message_id else None
        if text is None:
            return "", TEXT[lang]["fb_none"]
        return text, TEXT[lang]["copied"]


def build_sidebar(lang: str) -> dict[str, Any]:
    """The history column's components (inside the chat row)."""
    t = TEXT[lang]
    c: dict[str, Any] = {}
    c["search"] = gr.Textbox(label=t["history_search"], elem_id="fa-history-search", max_lines=1)
    c["list"] = gr.Radio([], label=t["history"], elem_id="fa-history", type="value")
    with gr.Row():
        c["rename_box"] = gr.Textbox(label=t["rename_box"], elem_id="fa-rename-box", max_lines=1, scale=3)
        c["rename"] = gr.Button(t["rename"], size="sm", elem_id="fa-rename", scale=1)
    c["delete"] = gr.Button(t["delete"], size="sm", variant="stop", elem_id="fa-delete")
    return c


def build_controls(lang: str) -> dict[str, Any]:
    """Under the chat: stop, regenerate, edit, versions, export, copy."""
    t = TEXT[lang]
    c: dict[str, Any] = {}
    with gr.Row():
        c["stop"] = gr.Button(t["stop"], size="sm", variant="stop", elem_id="fa-stop", visible=False)
        c["regenerate"] = gr.Button(t["regenerate"], size="sm", elem_id="fa-regenerate")
        c["edit"] = gr.Button(t["edit"], size="sm", elem_id="fa-edit")
        c["versions"] = gr.Radio([], label=t["versions"], elem_id="fa-versions", visible=False)
    with gr.Row():
        c["export"] = gr.Button(t["export"], size="sm", elem_id="fa-export")
        c["export_json"] = gr.Button(t["export_json"], size="sm", elem_id="fa-export-json")
        c["copy"] = gr.Button(t["copy"], size="sm", elem_id="fa-copy")
    c["file"] = gr.File(label="", elem_id="fa-export-file", visible=False, interactive=False)
    c["copy_box"] = gr.Textbox(visible=False, elem_id="fa-copy-text")
    c["editing"] = gr.State(False)
    c["client"] = gr.Textbox(visible=False, elem_id="fa-client")
    return c


def wire(demo: gr.Blocks, h: ChatHandlers, side: dict[str, Any], ctl: dict[str, Any], *, respond_inputs: list,
         outputs: list, box: Any, send: Any, lang_radio: Any, lang_state: Any, status: Any, chatbot: Any,
         sources: Any, session_state: Any, message_state: Any) -> None:
    """The events of the chat's send box and of the conversation controls."""
    hh = HistoryHandlers(h)
    client, stop, listing = ctl["client"], ctl["stop"], side["list"]
    list_inputs = [client, side["search"], session_state]

    def show_stop(client_id: str) -> tuple:
        return client_id, gr.update(visible=True)

    def after_answer(client_id: str, text: str, sid: str, request: gr.Request) -> tuple:
        # Stop stays while a question sent during this answer is being answered in the same session
        busy = bool(sid) and h.service.answering(sid)
        return (gr.update(visible=busy), False, hh.listing(client_id, text, sid, request),
                hh.versions(sid, client_id, request))

    after_outputs = [stop, ctl["editing"], listing, ctl["versions"]]
    for trigger, fn in ((box.submit, h.respond), (send.click, h.respond),
                        (ctl["regenerate"].click, None)):
        if fn is None:
            ev = trigger(show_stop, client, [client, stop], js=CLIENT_JS, trigger_mode="multiple").then(
                h.regenerate, [chatbot, session_state, lang_state, client], outputs, concurrency_limit=4,
                concurrency_id="chat", trigger_mode="multiple")
        else:
            # "multiple": a question sent while an answer streams or stops is taken, never dropped (Gradio's default
            # "once" ignores a send while the last one is pending); the service answers it after the one before
            ev = trigger(show_stop, client, [client, stop], js=CLIENT_JS, trigger_mode="multiple").then(
                fn, respond_inputs, outputs, concurrency_limit=4, concurrency_id="chat", trigger_mode="multiple")
        ev.then(after_answer, list_inputs, after_outputs).then(None, None, None, js=FOCUS_JS)
    stop.click(hh.stop, [session_state, lang_state, client], status, concurrency_limit=None)

    def start_edit(chat: list[dict[str, Any]], sid: str, lang: str, client_id: str, request: gr.Request) -> tuple:
        data = hh._session(sid, client_id, request)
        questions = [m["content"] for m in (data or {"messages": []})["messages"] if m["role"] == "user"]
        if not questions:
            return gr.skip(), False, TEXT[lang]["no_session"]
        return questions[-1], True, TEXT[lang]["editing"]

    ctl["edit"].click(start_edit, [chatbot, session_state, lang_state, client], [box, ctl["editing"], status]).then(
        None, None, None, js=FOCUS_JS)
    ctl["versions"].input(hh.choose, [ctl["versions"], session_state, lang_state, client], [chatbot, sources, status])
    listing.input(hh.open, [listing, lang_state, client],
                  [chatbot, sources, status, session_state, message_state, ctl["versions"]])
    side["search"].change(hh.listing, list_inputs, listing)
    side["rename"].click(hh.rename, [session_state, side["rename_box"], lang_state, client],
                         [status, side["rename_box"]]).then(
        hh.listing, list_inputs, listing)
    side["delete"].click(hh.delete, [session_state, lang_state, client],
                         [chatbot, sources, status, session_state, message_state]).then(hh.listing, list_inputs, listing)

    def export_md(sid: str, lang: str, client_id: str, request: gr.Request) -> Any:
        return hh.export_file(sid, "markdown", lang, client_id, request)

    def export_json(sid: str, lang: str, client_id: str, request: gr.Request) -> Any:
        return hh.export_file(sid, "json", lang, client_id, request)

    ctl["export"].click(export_md, [session_state, lang_state, client], ctl["file"])
    ctl["export_json"].click(export_json, [session_state, lang_state, client], ctl["file"])
    ctl["copy"].click(hh.copy_text, [session_state, message_state, lang_state, client],
                      [ctl["copy_box"], status]).then(
        None, ctl["copy_box"], None, js=COPY_JS)

    def on_load(client_id: str, lang: str) -> tuple:
        return client_id, lang

    demo.load(on_load, [client, lang_radio], [client, lang_radio], js=LOAD_JS).then(
        hh.listing, list_inputs, listing)
    lang_radio.input(None, lang_radio, None, js=SAVE_LANG_JS)

    def relabel(lang: str) -> tuple:
        t = TEXT[lang]
        return (gr.update(label=t["history_search"]), gr.update(label=t["history"]),
                gr.update(label=t["rename_box"]), gr.update(value=t["rename"]), gr.update(value=t["delete"]),
                gr.update(value=t["stop"]), gr.update(value=t["regenerate"]), gr.update(value=t["edit"]),
                gr.update(label=t["versions"]), gr.update(value=t["export"]), gr.update(value=t["export_json"]),
                gr.update(value=t["copy"]))

    lang_radio.change(relabel, lang_radio, [side["search"], listing, side["rename_box"], side["rename"],
                                            side["delete"], stop, ctl["regenerate"], ctl["edit"], ctl["versions"],
                                            ctl["export"], ctl["export_json"], ctl["copy"]])
