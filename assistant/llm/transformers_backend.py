"""An optional engine: transformers + torch on the CPU, for a Hugging Face model directory or a GGUF file.

Installed with the `torch` extra (pip install '.[torch]'; torch must be exactly 2.13.0, the CPU wheel).
A GGUF is dequantized to float32 at load time (`from_pretrained(dir, gguf_file=name)`): the 0.5B model
then runs at ~6 tok/s with ~4 GB RSS, 4-5x slower than llama.cpp. It exists for models that llama.cpp
cannot run and for comparing engines, not as the default.

Streaming runs `generate` in a worker thread feeding a TextIteratorStreamer; stop strings are cut here
(the model stops on them too), and a consumer that stops reading cancels the generation.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from assistant.llm.base import ChatModel, Message, ModelError, Usage, writes_han

INSTALL_HINT = "pip install '.[torch]'  (i.e. pip install torch==2.13.0 transformers accelerate gguf)"


def _imports() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise ModelError(f"The transformers backend needs torch and transformers: {INSTALL_HINT}") from exc
    return torch, transformers


class TransformersChatModel(ChatModel):
    """A chat model loaded by transformers from a model directory or a .gguf file."""

    def __init__(self, path: str | Path, n_threads: int = 2, seed: int = 7, name: str | None = None) -> None:
        super().__init__()
        torch, transformers = _imports()
        torch.set_num_threads(n_threads)
        self._torch, self._transformers = torch, transformers
        self.path = Path(path)
        self.name = name or self.path.name
        self.seed = seed
        self._lock = threading.Lock()
        folder, extra = self._source()
        started = time.perf_counter()
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True, **extra)
            self.model = transformers.AutoModelForCausalLM.from_pretrained(
                folder, local_files_only=True, dtype=torch.float32, **extra)
        except (OSError, ValueError, ImportError) as exc:
            raise ModelError(f"transformers could not load {self.path}: {exc}") from exc
        self.model.eval()
        self.load_s = time.perf_counter() - started
        self._han_ids: list[int] | None = None  # _han_tokens(), read once

    def _source(self) -> tuple[str, dict[str, str]]:
        """(folder, extra from_pretrained arguments): a GGUF file is named inside its folder."""
        if self.path.is_file() and self.path.suffix.lower() == ".gguf":
            return str(self.path.parent), {"gguf_file": self.path.name}
        if self.path.is_dir():
            return str(self.path), {}
        raise ModelError(f"{self.path} is neither a .gguf file nor a Hugging Face model directory.")

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def stream(
        self,
        messages: list[Message],
        *,
        max_tokens: int = 256,
        temperature: float = 0.1,
        stop: list[str] | None = None,
        language: str | None = None,
    ) -> Iterator[str]:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        inputs = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
        with self._lock:
            banned = self._han_tokens() if language == "en" else []
            yield from self._generate(inputs, max_tokens, temperature, list(stop or []), banned)

    def _han_tokens(self) -> list[int]:
        """Ids of the vocabulary's tokens that write or begin a Han character (`base.writes_han`), read from the
        vocabulary once per engine: what an English answer never samples, as with the llama.cpp engine."""
        if self._han_ids is None:
            from transformers.convert_slow_tokenizer import bytes_to_unicode  # byte-level BPE's (GPT-2's) alphabet

            byte_of = {c: b for b, c in bytes_to_unicode().items()}
            vocab = self.tokenizer.get_vocab()
            self._han_ids = sorted(i for token, i in vocab.items() if writes_han(_token_bytes(token, byte_of)))
        return self._han_ids

    def _generate(self, inputs: Any, max_tokens: int, temperature: float, stop: list[str],
                  banned: list[int]) -> Iterator[str]:
        tf = self._transformers
        streamer = tf.TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
        cancel = threading.Event()
        result: dict[str, Any] = {}
        kwargs = dict(**inputs, max_new_tokens=max_tokens, streamer=streamer,
                      stopping_criteria=tf.StoppingCriteriaList([_Cancelled(cancel)]),
                      do_sample=temperature > 0, pad_token_id=self.tokenizer.eos_token_id)
        if temperature > 0:
            kwargs["temperature"] = temperature
        if stop:
            kwargs.update(stop_strings=stop, tokenizer=self.tokenizer)
        if banned:
            kwargs["suppress_tokens"] = banned
        worker = threading.Thread(target=self._run, args=(kwargs, streamer, result), daemon=True)
        started = time.perf_counter()
        first: float | None = None
        worker.start()
        try:
            for piece in _cut_at_stop(streamer, stop):
                first = first or time.perf_counter()
                yield piece
        finally:
            cancel.set()  # the consumer may have stopped reading: end the generation
            worker.join()
        if "error" in result:
            raise ModelError(f"transformers generation failed: {result['error']}") from result["error"]
        self.last_usage = self._usage(inputs, result, started, first)

    def _run(self, kwargs: dict[str, Any], streamer: Any, result: dict[str, Any]) -> None:
        try:
            self._torch.manual_seed(self.seed)
            with self._torch.inference_mode():
                result["output"] = self.model.generate(**kwargs)
        except Exception as exc:  # noqa: BLE001 - reported to the consumer thread, which raises it
            result["error"] = exc
            streamer.end()

    def _usage(self, inputs: Any, result: dict[str, Any], started: float, first: float | None) -> Usage:
        end = time.perf_counter()
        prompt = int(inputs["input_ids"].shape[1])
        completion = int(result["output"].shape[1]) - prompt if "output" in result else 0
        extra = {"ttft_s": (first or end) - started, "total_s": end - started, "load_s": self.load_s}
        if first is not None and completion > 1 and end > first:
            extra["decode_tok_s"] = (completion - 1) / (end - first)
        return Usage(prompt_tokens=prompt, completion_tokens=completion, extra=extra)

    def close(self) -> None:
        with self._lock:
            self.model = None
            self.tokenizer = None


def _token_bytes(token: str, byte_of: dict[str, int]) -> bytes:
    """The bytes a byte-level vocabulary entry writes (`byte_of`: the alphabet's character -> byte); an added token
    ("<|im_start|>") as its UTF-8."""
    if all(c in byte_of for c in token):
        return bytes(byte_of[c] for c in token)
    return token.encode("utf-8")


def _cut_at_stop(pieces: Iterator[str], stop: list[str]) -> Iterator[str]:
    """Pass text through, holding back just enough to never emit a stop string or anything after it."""
    if not stop:
        yield from (p for p in pieces if p)
        return
    hold = max(len(s) for s in stop) - 1
    buffer = ""
    for piece in pieces:
        buffer += piece
        cut = min((buffer.find(s) for s in stop if s in buffer), default=-1)
        if cut >= 0:
            if buffer[:cut]:
                yield buffer[:cut]
            return
        if len(buffer) > hold:
            yield buffer[: len(buffer) - hold]
            buffer = buffer[len(buffer) - hold:]
    if buffer:
        yield buffer


class _Cancelled:
    """A stopping criterion that ends generation when the consumer stops reading."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)
