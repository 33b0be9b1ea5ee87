"""The default engine: a GGUF model run in-process by llama-cpp-python on the CPU.

What it owns: loading the model (memory-mapped), formatting messages with the chat template stored in
the GGUF, streaming text, token counting with the model's own tokenizer, and measuring each call
(prompt/completion tokens, time to first token, prefill and decode speed) into `last_usage`.

One generation at a time per model object (a lock): llama.cpp keeps one KV cache per context, and
reusing its longest common prefix with the previous prompt is what makes a warmed-up system prompt
or a follow-up question with the same sources start answering fast.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from assistant.llm.base import ChatModel, Message, ModelError, Usage, writes_han
from assistant.llm.wheelhouse import installed_record

log = logging.getLogger(__name__)

# A short fixed system prompt evaluated by warmup(); the answer pipeline can pass its own.
WARMUP_SYSTEM = "You are a helpful assistant."


def _import_llama() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:  # the default backend, but a compiled wheel: say how to get it
        raise ModelError(
            "llama-cpp-python is not installed: pip install 'llama-cpp-python==0.3.36' "
            "(it compiles from source: ~13 minutes on 2 cores), or use --backend transformers/openai."
        ) from exc
    return llama_cpp


def _draft_model(llama_cpp: Any, speculative: str) -> Any:
    """Speculative decoding: "prompt_lookup" drafts tokens by matching the recent output against the prompt,
    which pays when answers quote their sources (measured in docs/performance.md); "none" disables it."""
    if speculative == "prompt_lookup":
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        return LlamaPromptLookupDecoding(num_pred_tokens=10)
    if speculative not in ("", "none"):
        raise ModelError(f"Unknown speculative decoding mode {speculative!r}: use 'none' or 'prompt_lookup'.")
    return None


PREFIX_MAGIC = b"FAKV1\n"
PREFIX_FILES_KEPT = 3  # per model file: the most recently used prefixes (processes with other pins, other languages)
PREFIXES_IN_MEMORY = 2  # per engine: the pinned context and its twin in the other language (answer/pinned.py)


def count_with(llm: Any, text: str) -> int:
    """`text`'s length in a llama.cpp model's tokens (no BOS, special tokens read as text): one count for the model
    and for its vocabulary loaded alone."""
    return len(llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))


class LlamaVocabulary:
    """A GGUF model's name, file and token count from its vocabulary alone (llama.cpp's vocab-only load: 0.18 s and
    about 100 MB for the 1.5B model, against 0.7 s and its ~1 GB of weights mapped): what sizing the pinned context and
    finding its translations need before any answer needs the model, so a question refused before generation never
    loads it. `name` and `path` are those the model gets when it loads (factory.py)."""

    def __init__(self, path: str | Path, name: str | None = None) -> None:
        llama_cpp = _import_llama()
        self.path = Path(path)
        self.name = name or self.path.stem
        try:
            self._vocab = llama_cpp.Llama(model_path=str(self.path), vocab_only=True, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"llama.cpp could not load {self.path}: {exc}. Is it a complete GGUF file?") from exc

    def count_tokens(self, text: str) -> int:
        return count_with(self._vocab, text)


def prefix_file_info(path: Path) -> dict[str, Any]:
    """A cached prefix file's header (key, tokens, bytes) and whether its body matches the header's size and CRC;
    raises ValueError for a file that is not one. Reads the file; loads nothing into an engine."""
    data = Path(path).read_bytes()
    if not data.startswith(PREFIX_MAGIC):
        raise ValueError("not a prefix file")
    at = len(PREFIX_MAGIC)
    hlen = int.from_bytes(data[at : at + 8], "little")
    head = json.loads(data[at + 8 : at + 8 + hlen])
    blob = data[at + 8 + hlen :]
    intact = len(blob) == int(head["bytes"]) and zlib.crc32(blob) == int(head["crc32"])
    return {"key": head["key"], "tokens": len(head["ids"]), "bytes": len(blob), "intact": intact,
            "ids": head["ids"], "blob": blob}


class LlamaCppChatModel(ChatModel):
    """A chat model over one GGUF file."""

    def __init__(
        self,
        path: str | Path,
        n_ctx: int = 4096,
        n_threads: int = 2,
        seed: int = 7,
        n_batch: int = 512,
        name: str | None = None,
        speculative: str = "none",
        flash_attn: bool = True,
        state_dir: str | Path | None = None,
    ) -> None:
        super().__init__()
        llama_cpp = _import_llama()
        self.path = Path(path)
        self.name = name or self.path.stem
        self.seed = seed
        self._lock = threading.Lock()
        started = time.perf_counter()
        try:
            self._llm = llama_cpp.Llama(
                model_path=str(self.path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                n_batch=n_batch, seed=seed, use_mmap=True, verbose=False, flash_attn=flash_attn,
                draft_model=_draft_model(llama_cpp, speculative),
                # llama-cpp-python's speculative path writes every position's logits: without logits_all it
                # fails ("could not broadcast ... into shape (0,)"); with it the buffer is n_ctx x vocab floats
                logits_all=speculative == "prompt_lookup",
            )
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"llama.cpp could not load {self.path}: {exc}. Is it a complete GGUF file?") from exc
        self.load_s = time.perf_counter() - started
        self.n_ctx = n_ctx
        self.state_dir = Path(state_dir) if state_dir else None
        self.warmed_from = ""  # "", "prefill", "disk" or "memory": how the last warmup() got its KV cache
        # the cached prefixes, most recently warmed last: key -> (tokens, sequence 0's KV)
        self._prefixes: OrderedDict[str, tuple[list[int], bytes]] = OrderedDict()
        self.prefix_info: dict[str, Any] = {}  # what warmup() did: key, tokens, bytes, from, seconds, path
        self._file_stem = "".join(ch if ch.isalnum() or ch in "._" else "_" for ch in self.path.stem)[:60]
        st = self.path.stat()
        self._state_key = json.dumps({"llama_cpp": getattr(llama_cpp, "__version__", "?"),
                                      "model": str(self.path.resolve()), "size": st.st_size,
                                      "mtime_ns": st.st_mtime_ns, "n_ctx": n_ctx, "n_batch": n_batch,
                                      "flash_attn": flash_attn, "speculative": speculative})
        self._formatter = self._chat_formatter(llama_cpp)
        self._han_ids: np.ndarray | None = None  # _han_tokens(), read once

    def _chat_formatter(self, llama_cpp: Any) -> Any:
        """The chat template stored in the GGUF (what the model was trained with), rendered by jinja2."""
        from llama_cpp import llama_chat_format

        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelError(f"{self.path} has no chat template in its metadata; it is not a chat model.")
        model = self._llm._model
        eos, bos = self._llm.token_eos(), self._llm.token_bos()
        return llama_chat_format.Jinja2ChatFormatter(
            template=template,
            eos_token=model.token_get_text(eos) if eos != -1 else "",
            bos_token=model.token_get_text(bos) if bos != -1 else "",
            stop_token_ids=[eos],
        )

    def count_tokens(self, text: str) -> int:
        return count_with(self._llm, text)

    def _prompt(self, messages: list[Message]) -> tuple[list[int], list[str], Any]:
        """Token ids of the formatted conversation, the template's stop strings, its stopping criteria."""
        result = self._formatter(messages=messages)
        tokens = self._llm.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True)
        stops = result.stop if isinstance(result.stop, list) else [result.stop] if result.stop else []
        return tokens, stops, result.stopping_criteria

    def stream(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.1,
        stop: list[str] | None = None,
        language: str | None = None,
    ) -> Iterator[str]:
        tokens, template_stops, criteria = self._prompt(messages)
        if len(tokens) + 1 >= self.n_ctx:
            raise ModelError(f"The prompt has {len(tokens)} tokens; the context window is {self.n_ctx}. "
                             "Shorten the question or the retrieved context, or raise n_ctx.")
        max_tokens = min(max_tokens, self.n_ctx - len(tokens))
        # held while the caller iterates: consume the iterator or close() it to let the next call run
        with self._lock:
            self._ensure_prefix(tokens)
            banned = self._han_tokens() if language == "en" else None
            yield from self._generate(tokens, list(stop or []) + template_stops, criteria, max_tokens, temperature,
                                      banned)

    def _han_tokens(self) -> np.ndarray:
        """Ids of the vocabulary's tokens that write or begin a Han character (`base.writes_han`), read from the
        vocabulary once per engine (0.5 s)."""
        if self._han_ids is None:
            ids = [i for i in range(self._llm.n_vocab()) if writes_han(self._llm.detokenize([i]))]
            self._han_ids = np.array(ids, dtype=np.int64)
        return self._han_ids

    def _generate(
        self, tokens: list[int], stops: list[str], criteria: Any, max_tokens: int, temperature: float,
        banned: np.ndarray | None = None,
    ) -> Iterator[str]:
        llama_cpp = _import_llama()
        sampled: list[float] = []  # one timestamp per sampled token (the logits processor runs once per token)

        def count(_ids: Any, scores: Any) -> Any:
            sampled.append(time.perf_counter())
            if banned is not None and len(banned):
                scores[banned] = -np.inf
            return scores

        llama_cpp.llama_perf_context_reset(self._llm._ctx.ctx)
        started = time.perf_counter()
        first: float | None = None
        pieces = self._llm.create_completion(
            tokens, max_tokens=max_tokens, temperature=temperature, stop=stops, stream=True, seed=self.seed,
            stopping_criteria=criteria, logits_processor=llama_cpp.LogitsProcessorList([count]),
        )
        for chunk in pieces:
            text = chunk["choices"][0]["text"]
            if text:
                first = first or time.perf_counter()
                yield text
        self.last_usage = self._usage(len(tokens), sampled, started, first)

    def _usage(self, prompt_tokens: int, sampled: list[float], started: float, first: float | None) -> Usage:
        """Token counts and timings of the call that just ended.

        completion_tokens counts the tokens sampled, including the end-of-turn token when the model
        stopped by itself; prefill speed comes from llama.cpp's own counters (tokens not in the KV cache).
        """
        llama_cpp = _import_llama()
        perf = llama_cpp.llama_perf_context(self._llm._ctx.ctx)
        extra: dict[str, float] = {"ttft_s": (first or time.perf_counter()) - started, "load_s": self.load_s}
        # prompt tokens actually evaluated; the rest came from the KV cache of the previous call
        extra["prefill_tokens"] = float(perf.n_p_eval)
        extra["cached_tokens"] = float(max(0, prompt_tokens - perf.n_p_eval))
        if perf.t_p_eval_ms > 0:
            extra["prefill_tok_s"] = perf.n_p_eval / (perf.t_p_eval_ms / 1000)
        if len(sampled) > 1:
            extra["decode_tok_s"] = (len(sampled) - 1) / max(1e-9, sampled[-1] - sampled[0])
        extra["total_s"] = time.perf_counter() - started
        return Usage(prompt_tokens=prompt_tokens, completion_tokens=len(sampled), extra=extra)

    def warmup(self, system: str | None = None) -> None:
        """Make `system` (the fixed system message every answer starts with: the rules and the pinned documents) a
        cached prefix: its KV state is computed once, kept in memory and, with a `state_dir`, on disk.

        The file is keyed by the engine build, the model file, the context settings and the prefix's tokens
        (`prefix_key`), holds only sequence 0's KV (no logits) behind a header with that key and a CRC, and is
        loaded at the next start instead of prefilled (docs/performance.md, the pinned prefix). A file that is
        damaged, partial or written for another key is logged, removed and rebuilt, never loaded.
        """
        started = time.perf_counter()
        tokens = self.prefix_tokens(system or WARMUP_SYSTEM)
        key = self.prefix_key(tokens)
        path = self.state_dir / f"prefix-{self._file_stem}-{key}.kv" if self.state_dir is not None else None
        with self._lock:
            if key in self._prefixes:
                self.warmed_from = "memory"
            elif path is not None and (blob := self._load_prefix(path, key, tokens)) is not None:
                self._keep(key, tokens, blob)
                self.warmed_from = "disk"
            else:
                self._llm.reset()
                self._llm.eval(tokens)
                self._keep(key, tokens, self._seq_state())
                self.warmed_from = "prefill"
                if path is not None:
                    self._save_prefix(path, key, tokens, self._prefixes[key][1])
            self._prefixes.move_to_end(key)
            size = len(self._prefixes[key][1])
        seconds = time.perf_counter() - started
        self.prefix_info = {"key": key, "tokens": len(tokens), "bytes": size,
                            "from": self.warmed_from, "seconds": round(seconds, 3),
                            "path": str(path) if path is not None else ""}
        log.info("prefix of %d tokens %s in %.2f s (%s)", len(tokens),
                 {"disk": "loaded", "memory": "held in memory"}.get(self.warmed_from, "computed"), seconds, key)

    def prefix_tokens(self, system: str) -> list[int]:
        """The tokens every prompt with this system message starts with: the common prefix of two prompts that differ
        only in the user's turn (the chat template's system turn, whatever its format)."""
        one, _, _ = self._prompt([{"role": "system", "content": system}, {"role": "user", "content": "a"}])
        two, _, _ = self._prompt([{"role": "system", "content": system}, {"role": "user", "content": "b"}])
        n = next((i for i, (x, y) in enumerate(zip(one, two, strict=False)) if x != y), min(len(one), len(two)))
        return list(one[:n])

    def prefix_key(self, tokens: list[int]) -> str:
        """What a cached prefix is valid for: the engine build (llama-build.json), the model file, the context
        settings and the prefix's tokens."""
        build = (installed_record() or {}).get("key", "unrecorded")
        digest = hashlib.sha256((self._state_key + build + json.dumps(tokens)).encode()).hexdigest()
        return digest[:32]

    def _seq_state(self) -> bytes:
        """Sequence 0's KV cells as llama.cpp serialises them (no logits, no other state)."""
        llama_cpp = _import_llama()
        ctx = self._llm._ctx.ctx
        size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
        buf = (ctypes.c_uint8 * size)()
        n = int(llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0))
        return bytes(buf)[:n]

    def _set_seq_state(self, tokens: list[int], blob: bytes) -> bool:
        """Put a serialised prefix back as sequence 0 (the rest of the cache cleared); False when llama.cpp refuses."""
        llama_cpp = _import_llama()
        self._llm.reset()
        self._llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
        if int(llama_cpp.llama_state_seq_set_data(self._llm._ctx.ctx, buf, len(blob), 0)) == 0:
            self._llm.reset()
            self._llm._ctx.kv_cache_seq_rm(-1, 0, -1)
            return False
        self._llm.input_ids[: len(tokens)] = tokens
        self._llm.n_tokens = len(tokens)
        self._llm._requires_eval = True  # no live logits: the prompt's next token is decoded before sampling
        return True

    def _keep(self, key: str, tokens: list[int], blob: bytes) -> None:
        """Hold a prefix in memory: the PREFIXES_IN_MEMORY most recently warmed ones."""
        self._prefixes[key] = (tokens, blob)
        while len(self._prefixes) > PREFIXES_IN_MEMORY:
            self._prefixes.popitem(last=False)

    def _ensure_prefix(self, tokens: list[int]) -> None:
        """Before a prompt that starts with a cached prefix: when another prompt (a selection answer's, the other
        language's, a benchmark's) has displaced it from the KV cache, copy it back from memory instead of
        prefilling it."""
        for key, (prefix, blob) in list(self._prefixes.items()):
            n = len(prefix)
            if len(tokens) <= n or tokens[:n] != prefix:
                continue
            held = self._llm.n_tokens >= n and list(self._llm.input_ids[:n]) == prefix
            if not held and not self._set_seq_state(prefix, blob):
                log.warning("llama.cpp refused the cached prefix; prefilling it")
                del self._prefixes[key]
            return

    def _save_prefix(self, path: Path, key: str, tokens: list[int], blob: bytes) -> None:
        """Write the prefix file atomically: magic, header length, a JSON header (key, tokens, size, CRC), the KV."""
        head = json.dumps({"key": key, "ids": tokens, "bytes": len(blob), "crc32": zlib.crc32(blob)}).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(PREFIX_MAGIC + len(head).to_bytes(8, "little") + head + blob)
            os.replace(tmp, path)
            self._evict_prefixes(path)
        except OSError as exc:
            log.warning("could not keep the cached prefix in %s: %s", path, exc)

    def _evict_prefixes(self, keep: Path) -> None:
        """Keep this model's PREFIX_FILES_KEPT most recently used prefix files (a load touches its file), `keep` among
        them: another process sharing the cache with other pins, or a second language, must not delete the prefix a
        server is about to load."""
        def used(p: Path) -> float:
            try:
                return p.stat().st_mtime
            except OSError:
                return 0.0
        others = sorted((p for p in keep.parent.glob(f"prefix-{self._file_stem}-*.kv") if p != keep),
                        key=used, reverse=True)
        for old in others[PREFIX_FILES_KEPT - 1:]:
            old.unlink(missing_ok=True)

    def _load_prefix(self, path: Path, key: str, tokens: list[int]) -> bytes | None:
        """Load a prefix file written by _save_prefix for exactly this key and these tokens: its KV bytes, now in
        sequence 0; anything else (damaged, partial, written by another build or for another prefix) is logged,
        removed and None."""
        try:
            info = prefix_file_info(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            log.warning("cached prefix %s not loaded (%s): rebuilding it", path, exc or type(exc).__name__)
            path.unlink(missing_ok=True)
            return None
        problem = ("written for another engine, model or prefix" if info["key"] != key or info["ids"] != tokens
                   else "truncated or damaged" if not info["intact"]
                   else "llama.cpp refused it" if not self._set_seq_state(tokens, info["blob"]) else "")
        if problem:
            log.warning("cached prefix %s not loaded (%s): rebuilding it", path, problem)
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)  # most recently used: the last to be evicted
        except OSError:
            pass
        return info["blob"]

    def close(self) -> None:
        with self._lock:
            llm = getattr(self, "_llm", None)
            if llm is not None:
                llm.close()
                self._llm = None
