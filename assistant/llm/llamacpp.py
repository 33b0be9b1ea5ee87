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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assistant.llm.base import ChatModel, Message, ModelError, Usage

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
        self.warmed_from = ""  # "", "prefill" or "disk": how the last warmup() got its KV cache
        st = self.path.stat()
        self._state_key = json.dumps({"llama_cpp": getattr(llama_cpp, "__version__", "?"),
                                      "model": str(self.path.resolve()), "size": st.st_size,
                                      "mtime_ns": st.st_mtime_ns, "n_ctx": n_ctx, "n_batch": n_batch,
                                      "flash_attn": flash_attn, "speculative": speculative})
        self._formatter = self._chat_formatter(llama_cpp)

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
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

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
    ) -> Iterator[str]:
        tokens, template_stops, criteria = self._prompt(messages)
        if len(tokens) + 1 >= self.n_ctx:
            raise ModelError(f"The prompt has {len(tokens)} tokens; the context window is {self.n_ctx}. "
                             "Shorten the question or the retrieved context, or raise n_ctx.")
        max_tokens = min(max_tokens, self.n_ctx - len(tokens))
        # held while the caller iterates: consume the iterator or close() it to let the next call run
        with self._lock:
            yield from self._generate(tokens, list(stop or []) + template_stops, criteria, max_tokens, temperature)

    def _generate(
        self, tokens: list[int], stops: list[str], criteria: Any, max_tokens: int, temperature: float
    ) -> Iterator[str]:
        llama_cpp = _import_llama()
        sampled: list[float] = []  # one timestamp per sampled token (the logits processor runs once per token)

        def count(_ids: Any, scores: Any) -> Any:
            sampled.append(time.perf_counter())
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
        """Evaluate a fixed system prompt once, so later prompts that start with it reuse its KV cache.

        With a `state_dir`, the KV cache of that prompt is kept on disk (a few MB, keyed by the model file,
        the engine settings and the prompt's tokens) and restored at the next start instead of recomputed:
        ~3 s of prefill on two cores become a file read (docs/performance.md, start-up).
        """
        messages = [{"role": "system", "content": system or WARMUP_SYSTEM}, {"role": "user", "content": "Hi"}]
        tokens, _, _ = self._prompt(messages)
        path = self._state_file(tokens)
        if path is not None and self._restore_state(path):
            self.warmed_from = "disk"
            return
        for _ in self.stream(messages, max_tokens=1, temperature=0.0):
            pass
        self.warmed_from = "prefill"
        if path is not None:
            self._save_state(path)

    def _state_file(self, tokens: list[int]) -> Path | None:
        if self.state_dir is None:
            return None
        digest = hashlib.sha256((self._state_key + json.dumps(tokens)).encode()).hexdigest()[:32]
        return self.state_dir / f"kv-{digest}.bin"

    def _save_state(self, path: Path) -> None:
        """Write the KV cache (and the token ids it holds) atomically; a failure only costs the next start time."""
        llama_cpp = _import_llama()
        with self._lock:
            ctx = self._llm._ctx.ctx
            size = llama_cpp.llama_state_get_size(ctx)
            buf = (ctypes.c_uint8 * int(size))()
            n = int(llama_cpp.llama_state_get_data(ctx, buf, size))
            ids = [int(t) for t in self._llm.input_ids[: self._llm.n_tokens]]
        head = json.dumps({"ids": ids, "bytes": n}).encode()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(len(head).to_bytes(8, "little") + head + bytes(buf)[:n])
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("could not keep the warmed KV cache in %s: %s", path, exc)

    def _restore_state(self, path: Path) -> bool:
        """Load a KV cache written by _save_state; False (and the file removed) when it does not fit."""
        llama_cpp = _import_llama()
        try:
            data = path.read_bytes()
            hlen = int.from_bytes(data[:8], "little")
            head = json.loads(data[8 : 8 + hlen])
            blob = data[8 + hlen :]
            ids = [int(t) for t in head["ids"]]
            if len(blob) != int(head["bytes"]) or not 0 < len(ids) < self.n_ctx:
                raise ValueError("truncated state file")
        except FileNotFoundError:
            return False
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring a broken KV cache file %s: %s", path, exc)
            path.unlink(missing_ok=True)
            return False
        with self._lock:
            buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
            if int(llama_cpp.llama_state_set_data(self._llm._ctx.ctx, buf, len(blob))) != len(blob):
                log.warning("llama.cpp refused the KV cache file %s; recomputing it", path)
                self._llm.reset()
                path.unlink(missing_ok=True)
                return False
            self._llm.input_ids[: len(ids)] = ids
            self._llm.n_tokens = len(ids)
            self._llm._requires_eval = True  # the restored logits are not a live decode: replay one token
        return True

    def close(self) -> None:
        with self._lock:
            llm = getattr(self, "_llm", None)
            if llm is not None:
                llm.close()
                self._llm = None
