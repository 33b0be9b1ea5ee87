"""`assistant doctor`: checks the set-up one part at a time and says, for each, ok/warn/fail and what to do.

The checks, in order (names for `--check`): python, cpu (the CPU's features against the engine build's),
models (each packaged model file's sha256), embedder (loads and embeds one sentence), index (generation,
chunks, embedder, readable), dirs (state and cache directories writable), port (free to bind), selfcheck
(the engine self-check of assistant/llm/selfcheck.py: its remembered pass, or a run).
Each check returns one `Check` with its finding and fix in English and Chinese; `run_doctor` runs them and
never raises: a check that throws becomes a "fail" line. Part of the core: no ui/ or fastapi imports.
"""
from __future__ import annotations

import json
import math
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import UserError
from .llm.base import ModelError
from .llm.llamacpp import prefix_file_info
from .settings import Settings

OK, WARN, FAIL = "ok", "warn", "fail"

# llama.cpp's system-info names -> /proc/cpuinfo flag names (features the engine was compiled to use)
ENGINE_TO_CPU = {"SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma",
                 "BMI2": "bmi2", "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
                 "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8",
                 "AMX_BF16": "amx_bf16", "AMX_TILE": "amx_tile"}


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail
    found_en: str
    found_zh: str
    fix_en: str = ""
    fix_zh: str = ""

    def line(self, lang: str) -> str:
        found, fix = (self.found_zh, self.fix_zh) if lang == "zh" else (self.found_en, self.fix_en)
        arrow = " → 处理：" if lang == "zh" else " -> fix: "
        return f"{self.status:<4} {self.name:<13} {found}" + (arrow + fix if fix and self.status != OK else "")

    def to_dict(self, lang: str) -> dict[str, str]:
        found, fix = (self.found_zh, self.fix_zh) if lang == "zh" else (self.found_en, self.fix_en)
        return {"name": self.name, "status": self.status, "found": found, "fix": fix,
                "found_en": self.found_en, "found_zh": self.found_zh, "fix_en": self.fix_en, "fix_zh": self.fix_zh}


def _same(name: str, status: str, text: str, fix: str = "") -> Check:
    """A check whose finding reads the same in both languages (versions, paths, numbers)."""
    return Check(name, status, text, text, fix, fix)


# ---- the checks -----------------------------------------------------------------------------------------
def check_python(settings: Settings) -> Check:
    v = sys.version_info
    found = f"Python {v.major}.{v.minor}.{v.micro} ({sys.executable})"
    if (v.major, v.minor) == (3, 11):
        return _same("python", OK, found)
    return Check("python", WARN if (v.major, v.minor) > (3, 11) else FAIL, found + ": the project is built for 3.11",
                 found + "：本项目针对 3.11", "create the venv with python3.11: make clean; rm -rf .venv; make install",
                 "用 python3.11 重建虚拟环境：make clean; rm -rf .venv; make install")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags as the kernel reports them (first processor)."""
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def engine_features(system_info: str) -> set[str]:
    """The features llama.cpp says it was built with ("AVX2 = 1 | ..."), by their system-info names."""
    feats = set()
    for part in system_info.replace("\n", "|").split("|"):
        if "=" in part:
            key, _, val = part.partition("=")
            key = key.split(":")[-1].strip()
            if val.strip() == "1":
                feats.add(key)
    return feats


def check_cpu(settings: Settings) -> Check:
    if settings.backend != "llama":
        return Check("cpu", OK, f"skipped: backend {settings.backend} does not run llama.cpp",
                     f"跳过：{settings.backend} 后端不使用 llama.cpp")
    from .llm import wheelhouse
    from .llm.selfcheck import engine_system_info

    cpu = cpu_flags()
    record = wheelhouse.installed_record() or {}
    info = engine_system_info()
    feats = engine_features(info)
    needed = set(record.get("cpu_flags_required", [])) | {ENGINE_TO_CPU[f] for f in feats if f in ENGINE_TO_CPU}
    kind = ("native" if record.get("native") else "portable") if record else "unrecorded"
    build = f"{kind} build {record.get('key', '?')}"
    engine = " ".join(sorted(f for f in feats if f in ENGINE_TO_CPU)) or "?"
    extra = sorted(f for f in cpu if f.startswith(("avx512", "amx")))
    found = f"{build} uses {engine}; CPU has " + (" ".join(sorted(needed & cpu)) or "none of them") + (
        f" (+{len(extra)} AVX-512/AMX flags)" if extra else "")
    missing = sorted(needed - cpu) if cpu else []
    rebuild_en = "`make rebuild-llama` (the portable build), or `make run LLAMA_NATIVE=` after a native build"
    rebuild_zh = "运行 `make rebuild-llama`（可移植构建）；如果用的是本机构建，运行 `make run LLAMA_NATIVE=`"
    if missing:
        return Check("cpu", FAIL, f"{build} needs {' '.join(missing)}, which this CPU does not have",
                     f"{build} 需要这颗 CPU 没有的指令：{' '.join(missing)}", rebuild_en, rebuild_zh)
    if not cpu:
        return Check("cpu", WARN, f"{build} uses {engine}; /proc/cpuinfo lists no flags to compare",
                     f"{build} 使用 {engine}；/proc/cpuinfo 中没有可比较的标志")
    if any(f.startswith("AMX") for f in feats) or (record.get("native") and extra):
        return Check("cpu", WARN, found + ": AMX kernels or a native build crashed on AMX CPUs (SIGILL)",
                     found + "：AMX 内核或本机构建曾在支持 AMX 的 CPU 上崩溃（SIGILL）", rebuild_en, rebuild_zh)
    if not record:
        return Check("cpu", WARN, found + "; the venv has no llama-build.json (not installed by the wheelhouse)",
                     found + "；虚拟环境中没有 llama-build.json（不是由 wheelhouse 安装的）", rebuild_en, rebuild_zh)
    return _same("cpu", OK, found)


def check_models(settings: Settings) -> list[Check]:
    from .llm.models import PACKAGED, cached_path, file_sha256, prepare_model

    checks = []
    for spec in PACKAGED.values():
        name = f"model:{spec.name}"
        wanted = settings.model == spec.name or (settings.translate_queries and settings.translate_model == spec.name)
        fix = f"assistant model prepare {spec.name}"
        try:
            path = cached_path(spec, Path(settings.cache_dir))
        except ModelError as exc:
            checks.append(Check(name, FAIL if wanted else WARN, str(exc).splitlines()[0], str(exc).splitlines()[0],
                                spec.pip_command(), spec.pip_command()))
            continue
        if not path.is_file():
            status = FAIL if wanted else WARN
            checks.append(Check(name, status, f"{path} is missing", f"{path} 不存在", fix, fix))
            continue
        size = path.stat().st_size
        if size != spec.size:
            checks.append(Check(name, FAIL, f"{path} has {size:,} bytes, expected {spec.size:,}",
                                f"{path} 有 {size:,} 字节，应为 {spec.size:,}", fix + " --force", fix + " --force"))
            continue
        actual = file_sha256(path)
        if actual != spec.sha256:
            checks.append(Check(name, FAIL, f"{path.name} has sha256 {actual[:16]}..., expected {spec.sha256[:16]}...",
                                f"{path.name} 的 sha256 为 {actual[:16]}...，应为 {spec.sha256[:16]}...",
                                fix + " --force", fix + " --force"))
        else:
            checks.append(_same(name, OK, f"{path.name}: sha256 {actual[:16]}... matches"))
    if settings.model not in PACKAGED:  # a path: is it there and loadable in principle?
        try:
            path = prepare_model(settings.model, settings.cache_dir)
            checks.append(_same("model", OK, f"{path}"))
        except ModelError as exc:
            checks.append(Check("model", FAIL, str(exc), str(exc), "--model default (or a complete .gguf file)",
                                "--model default（或一个完整的 .gguf 文件）"))
    return checks


def _index_embedder(settings: Settings) -> str:
    from .index.location import open_index

    try:
        meta = open_index(settings).current_meta()
    except (UserError, OSError, ValueError):
        meta = None
    return (meta.embedder if meta is not None else None) or settings.embedder


def check_embedder(settings: Settings) -> Check:
    from .embed import embedder_for

    name = _index_embedder(settings)
    started = time.perf_counter()
    emb = embedder_for(settings, name)
    vec = emb.query("Which framework shards optimizer state? 哪个框架切分优化器状态？")
    secs = time.perf_counter() - started
    if vec.shape != (emb.dim,) or not all(math.isfinite(float(x)) for x in vec):
        return Check("embedder", FAIL, f"{name} returned a vector of shape {vec.shape}",
                     f"{name} 返回的向量形状为 {vec.shape}", "make install", "make install")
    return Check("embedder", OK, f"{name}: one sentence embedded into {emb.dim} dimensions in {secs:.1f} s",
                 f"{name}：一句话嵌入为 {emb.dim} 维，用时 {secs:.1f} 秒")


def check_index(settings: Settings) -> Check:
    from .embed import create_embedder
    from .index.identity import compare
    from .index.location import open_index

    fix_en, fix_zh = "build it: assistant index build (or make index)", "构建索引：assistant index build（或 make index）"
    try:
        index = open_index(settings)
        where = index.describe()
        gen = index.live(fresh=True)
    except UserError as exc:  # a Chroma server that does not answer, a malformed ASSISTANT_CHROMA_URL
        return Check("index", FAIL, exc.en, exc.zh, "start the Chroma server (chroma run --path DIR --host HOST "
                     "--port PORT) or fix ASSISTANT_CHROMA_URL", "启动 Chroma 服务（chroma run --path DIR --host HOST "
                     "--port PORT）或修改 ASSISTANT_CHROMA_URL")
    if gen is None:
        return Check("index", FAIL, f"no index in {where}", f"{where} 中没有索引", fix_en, fix_zh)
    try:
        snap = index.snapshot(gen)
        try:
            vectors, chunks, emb, meta = snap.store.count(), len(snap.chunks), snap.embedder_name, snap.meta
        finally:
            snap.close()
    except Exception as exc:  # noqa: BLE001 - any failure to open it is the finding
        return Check("index", FAIL, f"{gen} is unreadable: {type(exc).__name__}: {exc}",
                     f"{gen} 无法读取：{type(exc).__name__}: {exc}", fix_en, fix_zh)
    version = f" {meta.embedder_version}" if meta.embedder_version else ""
    found_en = f"{gen} in {where}: {chunks} chunks, {vectors} vectors, embedder {emb}{version}"
    found_zh = f"{where} 中的 {gen}：{chunks} 个片段，{vectors} 个向量，嵌入模型 {emb}{version}"
    if chunks == 0 or vectors != chunks:
        return Check("index", FAIL, found_en + ": the vector store does not match the chunks",
                     found_zh + "：向量库与片段不一致", fix_en, fix_zh)
    status = compare(meta, settings.embedder, create_embedder(emb, settings.threads))
    if status.status != "ok":
        fix = f"assistant index build --embedder {settings.embedder}"
        return Check("index", FAIL if status.refuse else WARN, f"{found_en}; {status.en}", f"{found_zh}；{status.zh}",
                     fix, fix)
    return Check("index", OK, found_en, found_zh)


def _writable(name: str, path: Path, env: str) -> Check:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(name, FAIL, f"{path} is not writable: {exc.strerror or exc}",
                     f"{path} 不可写：{exc.strerror or exc}",
                     f"make it writable, or point {env} to a writable directory",
                     f"修改权限，或把 {env} 指向一个可写目录")
    return Check(name, OK, f"{path} is writable", f"{path} 可写")


def check_dirs(settings: Settings) -> list[Check]:
    return [_writable("state", Path(settings.state_dir).resolve(), "ASSISTANT_STATE_DIR"),
            _writable("cache", Path(settings.cache_dir).resolve(), "ASSISTANT_CACHE_DIR")]


def check_port(settings: Settings, host: str | None = None, port: int | None = None) -> Check:
    host, port = host or settings.host, port or settings.port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            sock.bind((host, port))
        except OSError as exc:
            return Check("port", FAIL, f"{host}:{port} is in use or not bindable: {exc.strerror or exc}",
                         f"{host}:{port} 已被占用或无法绑定：{exc.strerror or exc}",
                         "stop the other server, or choose another port: --port N (make run PORT=N)",
                         "停止占用该端口的服务，或换一个端口：--port N（make run PORT=N）")
    return Check("port", OK, f"{host}:{port} is free", f"{host}:{port} 空闲")


def check_selfcheck(settings: Settings) -> list[Check]:
    if settings.backend != "llama":
        return [Check("selfcheck", OK, f"skipped: backend {settings.backend} (the self-check is for llama.cpp only)",
                      f"跳过：{settings.backend} 后端（自检只针对 llama.cpp）")]
    from .llm.selfcheck import EngineCheckFailed, check_model, llama_model_files

    checks = []
    for path in llama_model_files(settings):
        try:
            result = check_model(path, settings)
        except EngineCheckFailed as exc:
            checks.append(Check("selfcheck", FAIL, exc.en, exc.zh, "make rebuild-llama", "make rebuild-llama"))
            continue
        checks.append(Check("selfcheck", OK, result.line("en"), result.line("zh")))
    return checks


def check_prefix(settings: Settings) -> Check:
    """The cached pinned prefix (assistant/llm/llamacpp.py): its key, size and age, or that the next start builds it."""
    if settings.backend != "llama" or not settings.pinned_context:
        return Check("prefix", OK, "skipped: no pinned prefix is cached for this backend or setting",
                     "跳过：此后端或设置不缓存置顶前缀")
    files = sorted(Path(settings.cache_dir, "kv").glob("prefix-*.kv"), key=lambda p: p.stat().st_mtime)
    if not files:
        return Check("prefix", WARN, "no cached prefix yet: the next start computes it (about a minute on 2 cores)",
                     "尚无缓存的前缀：下次启动时计算（2 核约一分钟）", "assistant serve (or make run)", "assistant serve（或 make run）")
    path = files[-1]
    try:
        info = prefix_file_info(path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Check("prefix", WARN, f"{path} is not a prefix file ({exc}); the next start rebuilds it",
                     f"{path} 不是前缀文件（{exc}）；下次启动时重建")
    age_h = (time.time() - path.stat().st_mtime) / 3600
    if not info["intact"]:
        return Check("prefix", WARN, f"{path.name} is damaged; the next start rebuilds it",
                     f"{path.name} 已损坏；下次启动时重建")
    en = (f"prefix {info['key'][:12]}: {info['tokens']:,} tokens, {info['bytes'] / 1e6:.0f} MB, used {age_h:.1f} h ago"
          f" ({path}); {len(files)} prefix file(s) in the cache, at most 3 per model")
    zh = (f"前缀 {info['key'][:12]}：{info['tokens']:,} 个词元，{info['bytes'] / 1e6:.0f} MB，{age_h:.1f} 小时前使用"
          f"（{path}）；缓存中共 {len(files)} 个前缀文件，每个模型至多 3 个")
    twins = _translated_passages(Path(settings.cache_dir))
    if twins:
        en += f"; pinned-passage translations cached (all models): {twins}"
        zh += f"；已缓存的置顶段落译文（所有模型）：{twins}"
    return Check("prefix", OK, en, zh)


def _translated_passages(cache_dir: Path) -> int:
    """How many pinned-passage translations the twin files hold (assistant/answering/twin.py)."""
    total = 0
    for path in (cache_dir / "twin").glob("translations-*.json"):
        try:
            total += len(json.loads(path.read_text(encoding="utf-8")).get("entries", {}))
        except (OSError, ValueError, AttributeError):
            continue
    return total


CHECKS: dict[str, Callable[..., Check | list[Check]]] = {
    "python": check_python, "cpu": check_cpu, "models": check_models, "embedder": check_embedder,
    "index": check_index, "prefix": check_prefix, "dirs": check_dirs, "port": check_port, "selfcheck": check_selfcheck,
}


def _fix_for(name: str) -> tuple[str, str]:
    if name in ("models", "selfcheck"):
        return "assistant model prepare", "assistant model prepare"
    return "make install", "make install"


def run_doctor(settings: Settings, *, host: str | None = None, port: int | None = None,
               only: Iterable[str] | None = None) -> list[Check]:
    """Run the checks (all, or those named in `only`, in the standard order); never raises."""
    names = [n for n in CHECKS if only is None or n in set(only)]
    out: list[Check] = []
    for name in names:
        try:
            got = check_port(settings, host, port) if name == "port" else CHECKS[name](settings)
        except (UserError, ModelError, OSError, ImportError, ValueError, RuntimeError) as exc:
            text = exc.en if isinstance(exc, UserError) else str(exc)
            text_zh = exc.zh if isinstance(exc, UserError) else str(exc)
            fix_en, fix_zh = _fix_for(name)
            got = Check(name, FAIL, text.splitlines()[0] if text else type(exc).__name__,
                        text_zh.splitlines()[0] if text_zh else type(exc).__name__, fix_en, fix_zh)
        out.extend(got if isinstance(got, list) else [got])
    return out


def report(checks: list[Check], lang: str) -> dict[str, Any]:
    return {"ok": all(c.status != FAIL for c in checks), "lang": lang,
            "checks": [c.to_dict(lang) for c in checks]}


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0

