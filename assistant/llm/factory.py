"""Pick and build the chat model the settings ask for; describe the packaged models.

The engines are imported here lazily, so a missing optional backend (torch, a compiled llama.cpp)
fails only when chosen, with a message that says what to install.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

from assistant.errors import UserError
from assistant.llm.base import ChatModel, ModelError, Vocabulary
from assistant.llm.models import PACKAGED, model_status, prepare_model
from assistant.settings import Backend

BACKENDS: tuple[str, ...] = get_args(Backend)


def create_chat_model(settings: Any) -> ChatModel:
    """Build the ChatModel for settings.backend: "llama" (default), "transformers", "openai", or "scripted".

    "scripted" is a test and plumbing backend, not a model: it loads no weights and answers by quoting the
    first sources of its prompt with their [n] (assistant/llm/scripted.py), so a real server can run the
    whole pipeline (SSE, sessions, citation check) in seconds. Tests of answer behaviour need a real model.

    Raises UserError for a configuration mistake (unknown backend, no remote URL) and ModelError
    when the model itself cannot be prepared or loaded; both messages say what to do.
    """
    backend = getattr(settings, "backend", "llama") or "llama"
    if backend == "llama":
        return _llama(settings)
    if backend == "transformers":
        from assistant.llm.transformers_backend import TransformersChatModel

        path = prepare_model(settings.model, settings.cache_dir)
        return TransformersChatModel(path, n_threads=settings.threads, seed=settings.seed, name=str(settings.model))
    if backend == "openai":
        return _openai(settings)
    if backend == "scripted":
        from assistant.llm.scripted import ScriptedChatModel, quote_sources

        return ScriptedChatModel(quote_sources)
    raise UserError(
        "unknown_backend",
        f"Unknown generation backend {backend!r}: choose one of {', '.join(BACKENDS)}.",
        f"未知的生成后端 {backend!r}：请从 {', '.join(BACKENDS)} 中选择。",
    )


def create_vocabulary(settings: Any) -> Vocabulary | None:
    """The chat model's stand-in for naming it and counting its tokens without its weights, where the engine allows
    it (llama.cpp: the GGUF's vocabulary alone, `LlamaVocabulary`, named as `_llama` names the model); None for the
    other engines, whose count needs the model itself."""
    if (getattr(settings, "backend", "llama") or "llama") != "llama":
        return None
    path = prepare_model(settings.model, settings.cache_dir)
    if path.is_dir():
        return None
    from assistant.llm.llamacpp import LlamaVocabulary

    return LlamaVocabulary(path, name=str(settings.model))


def _llama(settings: Any) -> ChatModel:
    from assistant.llm.llamacpp import LlamaCppChatModel

    path = prepare_model(settings.model, settings.cache_dir)
    if path.is_dir():
        raise ModelError(f"{path} is a Hugging Face model directory; llama.cpp needs a .gguf file. "
                         "Use --backend transformers for it, or pass a .gguf path or a packaged name "
                         f"({', '.join(PACKAGED)}).")
    return LlamaCppChatModel(path, n_ctx=settings.n_ctx, n_threads=settings.threads, seed=settings.seed,
                             name=str(settings.model), speculative=getattr(settings, "speculative", "none"),
                             flash_attn=getattr(settings, "flash_attn", True),
                             state_dir=Path(settings.cache_dir) / "kv")


def _openai(settings: Any) -> ChatModel:
    if not settings.openai_base_url:
        raise UserError(
            "missing_openai_url",
            "The openai backend needs the server URL: set ASSISTANT_OPENAI_BASE_URL "
            "(e.g. http://127.0.0.1:8000/v1 for vLLM or llama.cpp server, http://127.0.0.1:11434/v1 for Ollama).",
            "openai 后端需要服务器地址：请设置 ASSISTANT_OPENAI_BASE_URL"
            "（例如 vLLM 或 llama.cpp server 用 http://127.0.0.1:8000/v1，Ollama 用 http://127.0.0.1:11434/v1）。",
        )
    from assistant.llm.remote import OpenAIChatModel
    from assistant.openai_http import RemotePolicy

    return OpenAIChatModel(settings.openai_base_url, settings.openai_model, settings.openai_api_key,
                           RemotePolicy.from_settings(settings))


def describe_models(settings: Any = None) -> list[dict[str, object]]:
    """One row per packaged model (name, file, size, sha256, prepared?) for `assistant model list`."""
    if settings is None:
        from assistant.settings import load_settings

        settings = load_settings()
    return [model_status(spec, Path(settings.cache_dir)) for spec in PACKAGED.values()]
