"""Adapters from the assistant to other libraries' interfaces, each behind its own extra.

Nothing else in `assistant/` imports this package: the core runs without these libraries installed.
- `assistant.integrations.langchain` (extra `[langchain]`): a retriever, a runnable and an `advise` tool.
"""
