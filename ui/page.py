"""The Gradio page, mounted on the FastAPI app at / (`mount_ui`): the chat tab (ui/web.py's ChatHandlers) with its
conversation controls (ui/history.py), the Advisor tab (ui/advisor_tab.py) and the Documents and Retrieval-test
tabs (ui/documents_tab.py) when present, and the zh/en interface switch."""
from __future__ import annotations

import gradio as gr
from fastapi import FastAPI

from assistant.service import AssistantService

from . import history
from .auth import Access
from .web import CSS, EXAMPLES, HEAD, TEXT, ChatHandlers

# ---- Advisor tab slot: ui/advisor_tab.py provides build_advisor_tab(service, lang_state) ------------------
try:
    from .advisor_tab import build_advisor_tab
except ImportError:  # the Advisor tab is optional
    build_advisor_tab = None

# ---- Documents and Retrieval-test tabs: ui/documents_tab.py -------------------------------------------------
try:
    from .documents_tab import build_documents_tab, build_retrieval_tab
except ImportError:  # optional like the Advisor tab
    build_documents_tab = build_retrieval_tab = None  # type: ignore[assignment]


def build_ui(service: AssistantService, access: Access | None = None) -> gr.Blocks:
    h = ChatHandlers(service, access)
    t = TEXT["zh"]
    with gr.Blocks(title="框架选型助手 · Framework Advisor") as demo:
        lang_state = gr.State("zh")
        session_state = gr.State("")
        message_state = gr.State("")
        with gr.Row(elem_id="fa-header"):
            title = gr.Markdown(t["title"], elem_id="fa-title")
            lang_radio = gr.Radio([("中文", "zh"), ("English", "en")], value="zh", label=t["lang"],
                                  elem_id="fa-lang", scale=0, min_width=220)
            if access is not None and access.enabled:
                gr.HTML('<a href="/logout" id="fa-logout">退出登录 / Sign out</a>', elem_id="fa-logout-box")
        with gr.Tabs():
            with gr.Tab(t["chat_tab"], id="chat") as chat_tab, gr.Row(elem_id="fa-chat-row"):
                with gr.Column(scale=1, min_width=220, elem_id="fa-history-col"):
                    side = history.build_sidebar("zh")
                with gr.Column(scale=3, min_width=320):
                    chatbot = gr.Chatbot(label=t["chatbot"], height=460, elem_id="fa-chat",
                                         feedback_options=None, sanitize_html=True,
                                         allow_tags=False, latex_delimiters=[])
                    status = gr.Markdown(t["ready"], elem_id="fa-status")
                    with gr.Row():
                        # one line growing to max_lines: Enter sends, Shift+Enter starts a new line (Gradio's rule)
                        box = gr.Textbox(label=t["question"], placeholder=t["placeholder"], scale=5, lines=1,
                                         max_lines=8, autofocus=True,
                                         max_length=service.settings.max_question_chars, elem_id="fa-question")
                        send = gr.Button(t["send"], variant="primary", scale=1, elem_id="fa-send")
                    with gr.Row():
                        new_chat = gr.Button(t["new"], size="sm", elem_id="fa-new")
                        up = gr.Button(t["up"], size="sm", elem_id="fa-up")
                        down = gr.Button(t["down"], size="sm", elem_id="fa-down")
                        fb_status = gr.Markdown("", elem_id="fa-feedback")
                    ctl = history.build_controls("zh")
                    gr.Examples(EXAMPLES, inputs=box, label=f"{TEXT['zh']['examples']} / {TEXT['en']['examples']}")
                with gr.Column(scale=2, min_width=300):
                    sources_title = gr.Markdown(t["sources"])
                    sources = gr.HTML("", elem_id="fa-sources")
            advisor_tab = None
            if build_advisor_tab is not None:  # ---- Advisor tab (ui/advisor_tab.py) ----
                with gr.Tab(t["advisor_tab"], id="advisor") as advisor_tab:
                    build_advisor_tab(service, lang_state)
            if build_documents_tab is not None:  # ---- Documents and Retrieval-test tabs (ui/documents_tab.py) ----
                with gr.Tab("文档 / Documents", id="documents", elem_id="fa-documents-tab") as documents_tab:
                    on_open = build_documents_tab(service, lang_state, h.owner)
                on_open(documents_tab)
                with gr.Tab("检索测试 / Retrieval", id="retrieval", elem_id="fa-retrieval-tab"):
                    build_retrieval_tab(service, lang_state)

        outputs = [chatbot, sources, status, session_state, message_state, box]
        inputs = [box, chatbot, session_state, lang_state, ctl["client"], ctl["editing"]]
        # several chats may retrieve at once; the service's generation queue serialises the model itself
        history.wire(demo, h, side, ctl, respond_inputs=inputs, outputs=outputs, box=box, send=send,
                     lang_radio=lang_radio, lang_state=lang_state, status=status, chatbot=chatbot, sources=sources,
                     session_state=session_state, message_state=message_state)
        new_chat.click(lambda lang: ([], "", TEXT[lang]["ready"], "", "", "", False), [lang_state],
                       [chatbot, sources, status, session_state, message_state, fb_status, ctl["editing"]])
        def rate_up(s: str, m: str, lang: str, request: gr.Request) -> str:
            return h.rate("up", s, m, lang, request)

        def rate_down(s: str, m: str, lang: str, request: gr.Request) -> str:
            return h.rate("down", s, m, lang, request)

        up.click(rate_up, [session_state, message_state, lang_state], fb_status)
        down.click(rate_down, [session_state, message_state, lang_state], fb_status)

        def switch(lang: str) -> tuple:
            t = TEXT[lang]
            tabs = [gr.update(label=t["advisor_tab"])] if advisor_tab is not None else []
            return (lang, gr.update(value=t["title"]), gr.update(label=t["lang"]), gr.update(label=t["chat_tab"]),
                    gr.update(label=t["chatbot"]), gr.update(value=t["ready"]),
                    gr.update(label=t["question"], placeholder=t["placeholder"]), gr.update(value=t["send"]),
                    gr.update(value=t["new"]), gr.update(value=t["up"]), gr.update(value=t["down"]),
                    gr.update(value=t["sources"]), *tabs)

        lang_radio.change(switch, lang_radio, [lang_state, title, lang_radio, chat_tab, chatbot, status, box, send,
                                               new_chat, up, down, sources_title]
                          + ([advisor_tab] if advisor_tab is not None else []))
    return demo


def mount_ui(app: FastAPI, service: AssistantService) -> FastAPI:
    theme = gr.themes.Soft(font=["system-ui", "WenQuanYi Zen Hei", "sans-serif"], font_mono=["monospace"])
    return gr.mount_gradio_app(app, build_ui(service, getattr(app.state, "access", None)), path="/",
                               css=CSS + history.CSS, head=HEAD, theme=theme,
                               footer_links=["api"], server_name=service.settings.host,
                               server_port=service.settings.port)
