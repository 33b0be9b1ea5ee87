"""One contract over every ChatModel (assistant/llm/): llama.cpp with the packaged `tiny` model, the remote
OpenAI-compatible engine against a real `llama_cpp.server` subprocess serving `tiny`, transformers (slow, only
with the torch extra), and the plumbing engine ScriptedChatModel as the factory builds it for "scripted".
Each: streams str pieces, honours max_tokens and stop, sets last_usage, counts tokens, warms up, closes.
What is special to one engine (KV-cache reuse, disk-kept warm state, remote errors) is in test_llm.py."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from llamaserver import llama_server

from assistant.llm.base import ChatModel
from assistant.llm.factory import create_chat_model
from assistant.settings import load_settings

CACHE = Path(os.environ.get("ASSISTANT_CACHE_DIR") or load_settings().cache_dir)
ASK = [{"role": "system", "content": "Answer in one short sentence."},
       {"role": "user", "content": "What is PyTorch? Describe it in a few words."}]


@pytest.fixture(scope="module")
def tiny_path() -> Path:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from assistant.llm.models import prepare_model

    return prepare_model("tiny", CACHE)


@pytest.fixture(scope="module")
def remote_server(tiny_path: Path) -> Iterator[str]:
    """A real OpenAI-compatible server (llama-cpp-python's) serving the tiny model on a loopback port."""
    pytest.importorskip("llama_cpp.server.app", reason="needs pip install 'llama-cpp-python[server]==0.3.36'")
    with llama_server(tiny_path, "tiny") as url:
        yield url


@pytest.fixture(scope="module", params=["llama", "openai", pytest.param("transformers", marks=pytest.mark.slow),
                                        "scripted"])
def make(request: pytest.FixtureRequest) -> Callable[[], ChatModel]:
    """Builds a fresh model of one engine, through the factory as the product does."""
    backend = request.param
    if backend == "llama":
        path = request.getfixturevalue("tiny_path")
        settings = load_settings(model=str(path), cache_dir=CACHE, threads=2, n_ctx=1024)
    elif backend == "openai":
        settings = load_settings(backend="openai", openai_base_url=request.getfixturevalue("remote_server"))
    elif backend == "transformers":
        pytest.importorskip("torch", reason="needs pip install '.[torch]'")
        settings = load_settings(backend="transformers", model="fast", cache_dir=CACHE, threads=2)
    else:
        settings = load_settings(backend="scripted")
    return lambda: create_chat_model(settings)


@pytest.fixture(scope="module")
def model(make: Callable[[], ChatModel]) -> Iterator[ChatModel]:
    m = make()
    yield m
    m.close()


@pytest.fixture(scope="module")
def free(model: ChatModel) -> str:
    """What the model says to ASK at temperature 0 with room to spare."""
    return model.complete(ASK, max_tokens=16, temperature=0.0)


def test_stream_yields_text_pieces_and_sets_usage(model: ChatModel) -> None:
    pieces = list(model.stream(ASK, max_tokens=16, temperature=0.0))
    assert len(pieces) > 1 and all(isinstance(p, str) for p in pieces) and "".join(pieces).strip()
    usage = model.last_usage
    assert usage.prompt_tokens > 5 and 0 < usage.completion_tokens <= 16


def test_max_tokens_is_honoured(model: ChatModel, free: str) -> None:
    short = model.complete(ASK, max_tokens=3, temperature=0.0)
    assert 0 < model.last_usage.completion_tokens <= 3
    assert free.startswith(short) and len(short) < len(free)


def test_stop_sequences_end_the_answer_before_them(model: ChatModel, free: str) -> None:
    word = free.split()[1]  # a word the model really produces at temperature 0
    stopped = model.complete(ASK, max_tokens=16, temperature=0.0, stop=[word])
    assert word not in stopped and free.startswith(stopped) and len(stopped) < len(free)


def test_count_tokens(model: ChatModel) -> None:
    one, five = model.count_tokens("PyTorch and JAX"), model.count_tokens("PyTorch and JAX " * 5)
    assert isinstance(one, int) and 1 <= one < five
    assert model.count_tokens("张量并行切分权重") >= 2


def test_warmup_then_the_same_answer(model: ChatModel, free: str) -> None:
    model.warmup(ASK[0]["content"])
    assert model.complete(ASK, max_tokens=16, temperature=0.0) == free


def test_close_frees_and_can_be_repeated(make: Callable[[], ChatModel]) -> None:
    m = make()
    assert m.complete(ASK, max_tokens=2, temperature=0.0)
    m.close()
    m.close()


def test_scripted_streams_its_script_word_by_word() -> None:
    from assistant.llm.scripted import ScriptedChatModel

    model = ScriptedChatModel("PyTorch 很灵活。 END ignored")
    assert list(model.stream(ASK, stop=["END"])) == ["PyTorch ", "很", "灵", "活", "。 "]
    assert model.last_usage.completion_tokens == 5 and model.calls == [ASK]


def test_remote_with_no_model_name_asks_the_server(remote_server: str) -> None:
    model = create_chat_model(load_settings(backend="openai", openai_base_url=remote_server))  # no key, no name
    assert model.model == "tiny" and model.name == "tiny"
