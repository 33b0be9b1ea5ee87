"""The interface strings of the chat's conversation controls (ui/history.py): stop, regenerate, edit, versions,
the history list, export and copy, in zh and en. Merged into ui/web.py's TEXT."""
from __future__ import annotations

ZH_EXTRA = {
    "stop": "■ 停止", "regenerate": "↻ 重新生成", "edit": "✎ 编辑上一问题", "history": "历史对话",
    "history_search": "搜索对话", "history_empty": "还没有对话。", "rename": "重命名", "rename_box": "新标题",
    "delete": "删除对话", "export": "导出 Markdown", "export_json": "导出 JSON", "copy": "复制回答（含脚注）",
    "copied": "已复制回答及其脚注。", "versions": "回答版本", "opened": "已打开对话。", "deleted": "已删除对话。",
    "renamed": "已重命名。", "editing": "编辑上一问题，发送后替换原回答（原回答保留为旧版本）。", "stopping": "正在停止…",
    "no_session": "请先选择或开始一个对话。",
}
EN_EXTRA = {
    "stop": "■ Stop", "regenerate": "↻ Regenerate", "edit": "✎ Edit last question", "history": "Conversations",
    "history_search": "Search conversations", "history_empty": "No conversations yet.", "rename": "Rename",
    "rename_box": "New title", "delete": "Delete conversation", "export": "Export Markdown",
    "export_json": "Export JSON", "copy": "Copy answer (with footnotes)", "copied": "Answer and footnotes copied.",
    "versions": "Answer versions", "opened": "Conversation opened.", "deleted": "Conversation deleted.",
    "renamed": "Renamed.", "editing": "Editing the last question: sending replaces its answer (kept as an older "
    "version).", "stopping": "Stopping…", "no_session": "Open or start a conversation first.",
}
