"""The engine self-check: a real prompt through llama.cpp in a child process, so a crash cannot take us down.

A llama-cpp-python build compiled for instructions this CPU does not run (a `-march=native` build from
another machine, ggml's AMX kernels) loads fine and answers a 1-token prompt, then dies with SIGILL on the
first prompt of a hundred tokens or more: in-process, that kills the server before it is ever ready and
says nothing. So before a model is used in-process, a child (`python -m assistant.llm.selfcheck`) loads the
GGUF and runs a prompt of >= 300 tokens plus a few generated ones, and prints its speeds as JSON.

What this module owns:
- `run_selfcheck(model, cache_dir)`: run the child under a time-out; on a signal, a non-zero exit or a
  time-out raise `EngineCheckFailed` (a ModelError) whose message, in the user's language, names the signal,
  the likely cause and the fix (`make rebuild-llama`, or `make run LLAMA_NATIVE=`); on success remember the
  pass in `<cache>/selfcheck.json` (written atomically) per (engine build, model file), so the next call for
  the same pair returns at once without a child.
- `engine_build()`: the id of the installed engine (llama-cpp-python version + size/mtime of its shared
  libraries, found without importing llama_cpp); `model_identity()`: path + size + recorded sha256.
- `check_settings(settings)`: what server start-up runs (llama backend only).
- `engine_system_info()`: llama.cpp's own list of compiled-in CPU features, read in a child as well.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from assistant.lang import env_language
from assistant.llm.base import ModelError
from assistant.llm.models import recorded_sha256

MIN_PROMPT_TOKENS = 320  # the AMX crash came on any prompt over ~100 tokens; the 1-token case worked
GEN_TOKENS = 8
DEFAULT_TIMEOUT_S = 300.0  # load + ~320 tokens of prefill: ~10 s for the 1.5B model on 2 idle cores
RECORD_FILE = "selfcheck.json"
_KEEP = 32  # remembered passes kept (one per engine build x model file)
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the `assistant` package

# A fixed passage, repeated until the prompt is long enough: ordinary text, so the prompt takes the same
# kernels (batched matrix multiplications) as a real question with its sources.
_PASSAGE = ("PyTorch builds its graph while the program runs, which makes debugging plain Python; JAX traces "
            "pure functions and compiles them with XLA; DeepSpeed adds ZeRO, which shards optimizer state, "
            "gradients and parameters across the workers of a data-parallel job. ")
_SYSTEM = "Answer in one short sentence."


@dataclass
class SelfCheckResult:
    model: str
    prompt_tokens: int
    completion_tokens: int
    prefill_tok_s: float
    decode_tok_s: float
    seconds: float
    remembered: bool = False  # True: an earlier pass for this (engine build, model file), no child was run

    def line(self, lang: str | None = None) -> str:
        lang = lang or env_language()
        name = Path(self.model).name
        if lang == "zh":
            head = "引擎自检通过（之前已通过）" if self.remembered else "引擎自检通过"
            return (f"{head}：{name}，提示 {self.prompt_tokens} 个 token，预填充 {self.prefill_tok_s:.1f} token/s，"
                    f"生成 {self.decode_tok_s:.1f} token/s")
        head = "engine self-check passed" + (" (remembered)" if self.remembered else "")
        return (f"{head}: {name}, {self.prompt_tokens}-token prompt, prefill {self.prefill_tok_s:.1f} tok/s, "
                f"decode {self.decode_tok_s:.1f} tok/s")


class EngineCheckFailed(ModelError):
    """The self-check child crashed, failed or timed out; str() is the message in the user's language."""

    def __init__(self, en: str, zh: str, *, signal_name: str | None = None, lang: str | None = None) -> None:
        self.en, self.zh, self.signal_name = en, zh, signal_name
        super().__init__(zh if (lang or env_language()) == "zh" else en)


# ---- identities ---------------------------------------------------------------------------------------
def _llama_package_dir() -> Path:
    spec = importlib.util.find_spec("llama_cpp")  # locates the package without importing (loading) it
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("llama-cpp-python is not installed: run `make install` (or `make rebuild-llama`), "
                         "or use --backend transformers/openai.")
    return Path(list(spec.submodule_search_locations)[0])


def engine_libraries() -> list[Path]:
    """The installed engine's shared libraries (libllama*.so, libggml*.so) inside the llama_cpp package."""
    lib = _llama_package_dir() / "lib"
    found = {p for pattern in ("libllama*.so*", "libggml*.so*") for p in lib.glob(pattern) if p.is_file()}
    return sorted(found)


def engine_build() -> dict[str, Any]:
    """Which engine is installed: version and the identity (name, size, mtime) of each shared library."""
    try:
        version = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    libs = [{"name": p.name, "size": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns}
            for p in engine_libraries()]
    ident = hashlib.sha256(json.dumps([version, libs], sort_keys=True).encode()).hexdigest()[:16]
    return {"version": version, "libraries": libs, "id": ident}


def model_identity(path: str | Path) -> dict[str, Any]:
    """Which model file: resolved path, size, and the verified sha256 (or, without one, the mtime)."""
    p = Path(path).resolve()
    st = p.stat()
    ident: dict[str, Any] = {"path": str(p), "size": st.st_size}
    sha = recorded_sha256(p)
    if sha:
        ident["sha256"] = sha
    else:
        ident["mtime_ns"] = st.st_mtime_ns
    return ident


def _pair_key(engine: dict[str, Any], model: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([engine["id"], model], sort_keys=True).encode()).hexdigest()[:24]


# ---- the remembered passes ----------------------------------------------------------------------------
def _record_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / RECORD_FILE


def _read_records(cache_dir: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(_record_path(cache_dir).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_records(cache_dir: str | Path, records: dict[str, Any]) -> None:
    path = _record_path(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".selfcheck.", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(records, f, indent=1)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def remembered(model_path: str | Path, cache_dir: str | Path) -> SelfCheckResult | None:
    """The remembered pass for this model file under the installed engine build, if there is one."""
    rec = _read_records(cache_dir).get(_pair_key(engine_build(), model_identity(model_path)))
    if not isinstance(rec, dict):
        return None
    try:
        return SelfCheckResult(**{**rec["result"], "remembered": True})
    except (KeyError, TypeError):
        return None


def _remember(result: SelfCheckResult, engine: dict[str, Any], model: dict[str, Any], cache_dir: str | Path) -> None:
    records = _read_records(cache_dir)
    records[_pair_key(engine, model)] = {"engine": engine, "model": model, "at": time.time(),
                                         "result": {k: v for k, v in asdict(result).items() if k != "remembered"}}
    newest = sorted(records.items(), key=lambda kv: kv[1].get("at", 0) if isinstance(kv[1], dict) else 0)[-_KEEP:]
    try:
        _write_records(cache_dir, dict(newest))
    except OSError:  # an unwritable cache only costs another check at the next start
        pass


# ---- running the child --------------------------------------------------------------------------------
def child_command(model_path: str | Path, *, threads: int = 2, flash_attn: bool = True) -> list[str]:
    return [sys.executable, "-m", "assistant.llm.selfcheck", "--model", str(model_path), "--threads", str(threads),
            "--flash-attn", "1" if flash_attn else "0"]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_PACKAGE_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


_FIX_EN = ("Fix: `make rebuild-llama` (compiles the portable build again and re-runs this check), or "
           "`make run LLAMA_NATIVE=` to go back to the portable build if you had chosen LLAMA_NATIVE=1.")
_FIX_ZH = ("解决办法：运行 `make rebuild-llama`（重新编译可移植版本并重做自检）；如果之前用了 LLAMA_NATIVE=1，"
           "运行 `make run LLAMA_NATIVE=` 换回可移植版本。")
_CAUSE_EN = ("Likely cause: this llama-cpp-python build uses CPU instructions this CPU does not run "
             "(a native -march=native build made for another CPU, or ggml's AMX/AVX-512 kernels).")
_CAUSE_ZH = ("可能的原因：当前的 llama-cpp-python 构建使用了这颗 CPU 不能执行的指令"
             "（为别的 CPU 编译的 -march=native 本机构建，或 ggml 的 AMX/AVX-512 内核）。")


def _crash(model: str, what_en: str, what_zh: str, signal_name: str | None = None) -> EngineCheckFailed:
    name = Path(model).name
    en = (f"The llama.cpp engine crashed on a test prompt with model {name} ({what_en}). {_CAUSE_EN} {_FIX_EN} "
          "Nothing was started.")
    zh = f"llama.cpp 引擎在测试提示上崩溃了（模型 {name}，{what_zh}）。{_CAUSE_ZH}{_FIX_ZH}服务没有启动。"
    return EngineCheckFailed(en, zh, signal_name=signal_name)


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def run_selfcheck(
    model_path: str | Path,
    cache_dir: str | Path,
    *,
    threads: int = 2,
    flash_attn: bool = True,
    timeout: float = DEFAULT_TIMEOUT_S,
    force: bool = False,
    command: list[str] | None = None,
) -> SelfCheckResult:
    """Pass once per (engine build, model file): a remembered pass returns at once, otherwise a child runs.

    `command` replaces the child's argv (the default is `child_command(...)`); it must print the result JSON.
    Raises EngineCheckFailed on a signal, a non-zero exit, unreadable output or a time-out.
    """
    engine, model = engine_build(), model_identity(model_path)
    if not force:
        earlier = remembered(model_path, cache_dir)
        if earlier is not None:
            return earlier
    argv = command or child_command(model_path, threads=threads, flash_attn=flash_attn)
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_child_env(),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise _crash(str(model_path), f"no answer within {timeout:.0f} s; the test process was stopped",
                     f"{timeout:.0f} 秒内没有完成，测试进程已被终止") from None
    if proc.returncode < 0:
        name = _signal_name(proc.returncode)
        raise _crash(str(model_path), f"the test process died by {name}", f"测试进程因信号 {name} 终止", name)
    out = _last_json(proc.stdout)
    if proc.returncode != 0 or out is None or not out.get("ok"):
        if out is not None and out.get("error"):  # the engine said what is wrong (e.g. not a loadable GGUF)
            msg = str(out["error"])
            raise EngineCheckFailed(f"Engine self-check failed: {msg}", f"引擎自检失败：{msg}")
        tail = (proc.stderr.strip().splitlines() or [""])[-1][:300]
        raise _crash(str(model_path), f"the test process exited with code {proc.returncode}: {tail}",
                     f"测试进程以退出码 {proc.returncode} 结束：{tail}")
    try:
        result = SelfCheckResult(model=str(model_path), prompt_tokens=int(out["prompt_tokens"]),
                                 completion_tokens=int(out["completion_tokens"]),
                                 prefill_tok_s=float(out.get("prefill_tok_s", 0.0)),
                                 decode_tok_s=float(out.get("decode_tok_s", 0.0)),
                                 seconds=time.perf_counter() - started)
    except (KeyError, TypeError, ValueError):
        raise _crash(str(model_path), "the test process printed no result", "测试进程没有输出结果") from None
    _remember(result, engine, model, cache_dir)
    return result


def check_settings(settings: Any, log: Callable[[str], None] = print) -> list[SelfCheckResult]:
    """What server start-up runs: the self-check of each llama.cpp model the settings will load in-process
    (the chat model, and the translating model when translation is on). Other backends are not checked."""
    if not getattr(settings, "selfcheck", True):
        return []
    results = []
    for path in llama_model_files(settings):
        result = check_model(path, settings)
        log(result.line())
        results.append(result)
    return results


def llama_model_files(settings: Any) -> list[Path]:
    """The GGUF files the settings make llama.cpp load in-process (none for another backend); prepares them."""
    if (getattr(settings, "backend", "llama") or "llama") != "llama":
        return []
    from assistant.llm.models import prepare_model

    names = [settings.model] + ([settings.translate_model] if getattr(settings, "translate_queries", False) else [])
    paths = [prepare_model(name, settings.cache_dir) for name in dict.fromkeys(str(n) for n in names)]
    return [p for p in paths if p.is_file()]  # a Hugging Face directory: the factory says llama.cpp cannot load it


def check_model(path: Path, settings: Any, *, force: bool = False) -> SelfCheckResult:
    """run_selfcheck with the engine settings (threads, flash attention, time-out) the server would use."""
    return run_selfcheck(path, settings.cache_dir, threads=settings.threads,
                         flash_attn=getattr(settings, "flash_attn", True), force=force,
                         timeout=getattr(settings, "selfcheck_timeout_s", DEFAULT_TIMEOUT_S))


def engine_system_info(timeout: float = 60.0) -> str:
    """llama.cpp's list of compiled-in features ("CPU : SSE3 = 1 | AVX = 1 | ..."), read in a child process."""
    _llama_package_dir()
    argv = [sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_child_env(),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ModelError(f"llama_cpp did not report its features within {timeout:.0f} s") from None
    if proc.returncode != 0:
        what = _signal_name(proc.returncode) if proc.returncode < 0 else f"exit code {proc.returncode}"
        raise ModelError(f"importing llama_cpp failed ({what})")
    return proc.stdout.strip()


# ---- the child ----------------------------------------------------------------------------------------
def _child(model: str, threads: int, flash_attn: bool) -> dict[str, Any]:
    from assistant.llm.llamacpp import LlamaCppChatModel

    llm = LlamaCppChatModel(model, n_ctx=1024, n_threads=threads, flash_attn=flash_attn)
    try:
        text = _PASSAGE
        messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": text}]
        while len(llm._prompt(messages)[0]) < MIN_PROMPT_TOKENS:
            text += _PASSAGE
            messages[1]["content"] = text + "\nWhich framework shards optimizer state?"
        for _ in llm.stream(messages, max_tokens=GEN_TOKENS, temperature=0.0):
            pass
        u = llm.last_usage
        return {"ok": True, "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                "prefill_tok_s": round(u.extra.get("prefill_tok_s", 0.0), 2),
                "decode_tok_s": round(u.extra.get("decode_tok_s", 0.0), 2),
                "load_s": round(u.extra.get("load_s", 0.0), 2)}
    finally:
        llm.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Engine self-check (child process): a prompt of >= "
                                f"{MIN_PROMPT_TOKENS} tokens through llama.cpp; prints its speeds as JSON.")
    p.add_argument("--model", required=True, help="a .gguf file")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--flash-attn", choices=["0", "1"], default="1")
    args = p.parse_args(argv)
    try:
        out = _child(args.model, args.threads, args.flash_attn == "1")
    except ModelError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}, ensure_ascii=False), flush=True)
        return 2
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
