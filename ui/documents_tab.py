"""The Documents and Retrieval-test tabs of the Gradio UI (mounted by ui/web.py, like ui/advisor_tab.py).

Documents: upload a file (md, rst, ipynb, html, pdf, txt) and watch its job's progress bar (chunks embedded of
the total) until it is searchable, the list of uploaded documents (name, chunks, added, size) with delete, and
the chat's sources panel (ui/web.py) marks the passages an
answer used from them. Retrieval test: a query's ranked passages
with their dense, keyword and fused scores and the terms that matched (AssistantService.search_explained), so
a user sees why a passage ranks where it does. All work is the service's (assistant/documents.py); every text
shown is HTML-escaped. Labels are bilingual; messages follow the interface language in `lang_state`.
"""
from __future__ import annotations

import html
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from assistant.documents import UPLOAD_SUFFIXES
from assistant.errors import UserError

POLL_S = 0.3
MSG = {
    "zh": {"queued": "排队中…", "running": "索引中：{d}/{t} 个片段", "done": "完成：{name} 已可检索（{t} 个片段，{s:.1f} 秒）。",
           "failed": "失败：{r}", "none": "请先选择一个文件。", "deleted": "已删除 {name}。", "pick": "请先选择要删除的文档。",
           "empty": "还没有上传的文档。", "noq": "请输入查询。", "nohits": "没有检索到段落。"},
    "en": {"queued": "Queued…", "running": "Indexing: {d}/{t} chunks", "done": "Done: {name} is searchable ({t} chunks, "
           "{s:.1f} s).", "failed": "Failed: {r}", "none": "Choose a file first.", "deleted": "Deleted {name}.",
           "pick": "Choose a document to delete first.", "empty": "No uploaded documents yet.",
           "noq": "Type a query.", "nohits": "No passages found."},
}
Owner = Callable[[Any], Any]


def _e(x: Any) -> str:
    return html.escape(str(x))


def progress_html(done: int, total: int, text: str) -> str:
    return (f"<div class='fa-progress'><progress value='{int(done)}' max='{max(int(total), 1)}'></progress> "
            f"<span>{_e(text)}</span></div>")


def documents_html(docs: list[dict[str, Any]], lang: str) -> str:
    if not docs:
        return f"<p id='doc-empty'>{_e(MSG[lang]['empty'])}</p>"
    head = ("<tr><th>名称 / Name</th><th>片段 / Chunks</th><th>添加时间 / Added</th><th>大小 / Size</th>"
            "<th>状态 / Status</th><th>ID</th></tr>")
    rows = "".join(f"<tr class='doc-row'><td>{_e(d['name'])}</td><td>{d['chunks']}</td><td>{_e(d['added'])}</td>"
                   f"<td>{_e(d['size'])}</td><td>{_e(d['status'])}</td><td><code>{_e(d['id'])}</code></td></tr>"
                   for d in docs)
    return f"<table class='doc-table'><thead>{head}</thead><tbody>{rows}</tbody></table>"


def explain_html(hits: list[Any], why: dict[str, Any], lang: str) -> str:
    if not hits:
        return f"<p>{_e(MSG[lang]['nohits'])}</p>"
    terms = " ".join(f"<code>{_e(t)}</code>" for t in why["terms"] + why["translation_terms"])
    head = ("<tr><th>#</th><th>融合 / Fused</th><th>向量 / Dense</th><th>关键词 / Keyword (BM25 → sat.)</th>"
            "<th>权重 / w</th><th>命中词 / Matched terms</th><th>来源 / Source</th></tr>")
    rows = []
    for i, (h, e) in enumerate(zip(hits, why["hits"], strict=True), 1):
        c = h.chunk
        matched = " ".join(f"<mark>{_e(t)}</mark>" for t in e["matched_terms"]) or "—"
        heading = " › ".join(c.heading_path)
        rows.append(f"<tr class='ret-row'><td>{i}</td><td><b>{h.score:.3f}</b></td><td>{h.dense:.3f}</td>"
                    f"<td>{h.keyword:.2f} → {e['keyword_saturated']:.3f}</td><td>{e['dense_weight']:.2f}</td>"
                    f"<td>{matched}</td><td>{_e(c.source)}:{c.lines[0]}-{c.lines[1]}<br><small>{_e(heading)}"
                    f"</small><details><summary>…</summary>{_e(c.text[:600])}</details></td></tr>")
    return (f"<p>检索词 / Terms searched: {terms}</p><p><small>fused = w·dense + (1−w)·sat + boosts; "
            f"sat = bm25/(bm25+{why['bm25_saturation']:g})</small></p>"
            f"<table class='ret-table'><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>")


class DocumentHandlers:
    def __init__(self, service: Any, owner: Owner | None = None) -> None:
        self.service = service
        self.owner = owner or (lambda request: None)

    def _uploads(self) -> list[dict[str, Any]]:
        return self.service.list_documents("upload")

    def refresh(self, lang: str) -> tuple[str, Any]:
        try:
            docs = self._uploads()
        except UserError as exc:
            return f"<p>{_e(exc.message(lang))}</p>", gr.update(choices=[], value=None)
        choices = [(f"{d['name']} ({d['id'][:8]})", d["id"]) for d in docs if d["status"] == "indexed"]
        return documents_html(docs, lang), gr.update(choices=choices, value=None)

    def upload(self, path: str | None, lang: str, request: gr.Request | None = None) -> Iterator[tuple]:
        m = MSG[lang]
        if not path:
            yield (progress_html(0, 1, m["none"]), *self.refresh(lang))
            return
        name = Path(path).name
        try:
            accepted = self.service.add_document(name, Path(path).read_bytes(), owner=self.owner(request))
        except UserError as exc:
            yield (progress_html(0, 1, m["failed"].format(r=exc.message(lang))), *self.refresh(lang))
            return
        job = self.service.document_job(accepted["job_id"])
        yield (progress_html(0, job.total, m["queued"]), *self.refresh(lang))
        while job.status in ("queued", "running"):
            time.sleep(POLL_S)
            text = m["queued"] if job.status == "queued" else m["running"].format(d=job.done, t=job.total)
            yield progress_html(job.done, job.total, text), gr.skip(), gr.skip()
        if job.status == "failed":
            text = m["failed"].format(r=job.reason_zh if lang == "zh" and job.reason_zh else job.reason)
            yield (progress_html(0, job.total, text), *self.refresh(lang))
            return
        yield (progress_html(job.total, job.total, m["done"].format(name=name, t=job.total, s=job.seconds)),
               *self.refresh(lang))

    def delete(self, doc_id: str | None, lang: str) -> tuple:
        m = MSG[lang]
        if not doc_id:
            return (m["pick"], *self.refresh(lang))
        name = next((d["name"] for d in self._uploads() if d["id"] == doc_id), doc_id)
        try:
            self.service.delete_document(doc_id)
        except UserError as exc:
            return (m["failed"].format(r=exc.message(lang)), *self.refresh(lang))
        return (m["deleted"].format(name=name), *self.refresh(lang))

    def explain(self, query: str, k: float, kind: str, lang: str) -> str:
        if not (query or "").strip():
            return f"<p>{_e(MSG[lang]['noq'])}</p>"
        try:
            hits, why = self.service.search_explained(query, int(k), {"kind": kind} if kind else None)
        except UserError as exc:
            return f"<p class='ret-error'>{_e(exc.message(lang))}</p>"
        return explain_html(hits, why, lang)


def build_documents_tab(service: Any, lang_state: Any, owner: Owner | None = None) -> Callable[[Any], Any]:
    """The Documents tab's components, inside the caller's gr.Tab. Returns `on_open(tab)`, which the caller
    calls with the gr.Tab once it is closed, so the list refreshes whenever the tab is opened."""
    h = DocumentHandlers(service, owner)
    kinds = ", ".join(s.lstrip(".") for s in UPLOAD_SUFFIXES)
    gr.Markdown("### 我的文档 / My documents\n上传团队自己的文档（集群、基准测试、内部规范），上传后即可在问答中检索并引用；"
                "问答的来源栏中标为“我的文档”。 / Upload your team's own documents; once indexed, answers search "
                f"and cite them (marked “my document” in the chat's sources). ({kinds}; ≤ {service.settings.max_upload_bytes // 1_000_000} MB)")
    with gr.Row():
        file = gr.File(label="选择文件 / Choose a file", file_types=list(UPLOAD_SUFFIXES), type="filepath",
                       elem_id="doc-file", scale=3)
        with gr.Column(scale=2):
            add = gr.Button("上传并索引 / Upload and index", variant="primary", elem_id="doc-upload")
            status = gr.HTML("", elem_id="doc-status")
    listing = gr.HTML("", elem_id="doc-list")
    with gr.Row():
        pick = gr.Dropdown([], label="要删除的文档 / Document to delete", elem_id="doc-pick", scale=3)
        delete = gr.Button("删除 / Delete", variant="stop", elem_id="doc-delete", scale=1)
        refresh = gr.Button("刷新 / Refresh", elem_id="doc-refresh", scale=1)
    deleted = gr.Markdown("", elem_id="doc-deleted")
    add.click(h.upload, [file, lang_state], [status, listing, pick], concurrency_limit=1, concurrency_id="documents")
    delete.click(h.delete, [pick, lang_state], [deleted, listing, pick], concurrency_limit=1,
                 concurrency_id="documents")
    refresh.click(h.refresh, [lang_state], [listing, pick])
    return lambda tab: tab.select(h.refresh, [lang_state], [listing, pick])


def build_retrieval_tab(service: Any, lang_state: Any) -> None:
    """The retrieval test view: ranked passages with dense, keyword and fused scores and the matched terms."""
    h = DocumentHandlers(service)
    gr.Markdown("### 检索测试 / Retrieval test\n看看一个查询检索到哪些段落、为什么这样排序（先于怪罪模型）。 / See which passages "
                "a query finds and why they rank so, before blaming the model.")
    with gr.Row():
        query = gr.Textbox(label="查询 / Query", scale=4, elem_id="ret-query",
                           max_length=service.settings.max_question_chars)
        k = gr.Slider(1, 20, value=8, step=1, label="k", scale=1, elem_id="ret-k")
        kind = gr.Radio([("全部 / All", ""), ("只用我的文档 / Only my documents", "upload"),
                         ("不含我的文档 / Without my documents", "corpus")], value="", label="范围 / Scope",
                        elem_id="ret-kind", scale=2)
        run = gr.Button("检索 / Search", variant="primary", elem_id="ret-run", scale=1)
    result = gr.HTML("", elem_id="ret-result")
    query.submit(h.explain, [query, k, kind, lang_state], result)
    run.click(h.explain, [query, k, kind, lang_state], result)
