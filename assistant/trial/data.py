"""The trial's data: synthetic of a stated size by default, or the user's CSV/NPZ, checked and written as one NPZ.

Every framework reads the same file (`data.npz` in the run directory) with `np.load(allow_pickle=False)`:
`x` float32 and `y` int64 labels 0..classes-1 (mlp: x is (n, features); cnn: (n, size, size, channels), NHWC),
or `tokens` int64 (n, seq_len + 1) for the language model. Synthetic data are learnable, so a falling loss
means the step trains: mlp labels are the argmax of a fixed random projection; cnn labels say which quadrant
holds a bright square; lm sequences count up modulo the vocabulary with a step of 1-4 per sequence.

A user's file is validated before anything runs: a regular file, a .csv or .npz suffix, at most
MAX_DATA_BYTES, no pickled objects, numbers only, the shapes the task needs, a sample count within
[MIN_SAMPLES, MAX_SAMPLES]; every refusal is a UserError in both languages that names the file.
A CSV is features then an integer label in the last column (one header line allowed).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError

MAX_DATA_BYTES = 200 * 2**20
MIN_SAMPLES = 64
MAX_SAMPLES = 1_000_000
MAX_CLASSES = 1000
MAX_FEATURES = 4096

# The shapes of the model and the synthetic data, per task (the same for every framework).
DEFAULTS: dict[str, dict[str, Any]] = {
    "mlp": {"samples": 4096, "features": 32, "hidden": 64, "classes": 4, "batch": 64, "lr": 3e-3},
    "cnn": {"samples": 2048, "size": 16, "channels": 1, "classes": 4, "batch": 32, "lr": 3e-3},
    "lm": {"samples": 1024, "seq_len": 32, "vocab": 64, "d_model": 64, "heads": 4, "layers": 2, "ff": 128,
           "batch": 16, "lr": 3e-3},
}


def _refuse(code: str, en: str, zh: str) -> UserError:
    return UserError(code, en, zh, 422)


def synthetic(task: str, seed: int, samples: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Arrays and the configuration they imply (shapes, classes)."""
    spec = dict(DEFAULTS[task])
    n = int(samples or spec["samples"])
    if not MIN_SAMPLES <= n <= MAX_SAMPLES:
        raise _refuse("trial_bad_samples", f"samples must be between {MIN_SAMPLES} and {MAX_SAMPLES}.",
                      f"样本数必须在 {MIN_SAMPLES} 到 {MAX_SAMPLES} 之间。")
    spec["samples"] = n
    rng = np.random.default_rng(seed)
    if task == "mlp":
        x = rng.standard_normal((n, spec["features"])).astype(np.float32)
        w = rng.standard_normal((spec["features"], spec["classes"])).astype(np.float32)
        return {"x": x, "y": np.argmax(x @ w, axis=1).astype(np.int64)}, spec
    if task == "cnn":
        s, c = spec["size"], spec["channels"]
        x = (0.3 * rng.standard_normal((n, s, s, c))).astype(np.float32)
        y = rng.integers(0, spec["classes"], n).astype(np.int64)
        h = s // 2
        for i, label in enumerate(y):
            r0, c0 = (label // 2) * h + rng.integers(0, h - 3), (label % 2) * h + rng.integers(0, h - 3)
            x[i, r0:r0 + 3, c0:c0 + 3, :] += 1.5
        return {"x": x, "y": y}, spec
    t, v = spec["seq_len"], spec["vocab"]
    start = rng.integers(0, v, (n, 1))
    stride = rng.integers(1, 5, (n, 1))
    tokens = ((start + stride * np.arange(t + 1)) % v).astype(np.int64)
    return {"tokens": tokens}, spec


def check_path(path: str | Path) -> Path:
    """The user's data file, resolved, or a UserError saying why not."""
    p = Path(path).expanduser()
    name = p.name or str(path)
    if p.suffix.lower() not in (".csv", ".npz"):
        raise _refuse("trial_data_type", f"{name}: the data must be a .csv or .npz file.",
                      f"{name}：数据文件必须是 .csv 或 .npz。")
    try:
        p = p.resolve(strict=True)
    except (OSError, RuntimeError):
        raise _refuse("trial_data_missing", f"{name}: no such file.", f"{name}：文件不存在。") from None
    if not p.is_file():
        raise _refuse("trial_data_not_file", f"{name}: not a regular file.", f"{name}：不是普通文件。")
    size = p.stat().st_size
    if size > MAX_DATA_BYTES:
        raise _refuse("trial_data_too_large", f"{name}: {size} bytes; the limit is {MAX_DATA_BYTES}.",
                      f"{name}：{size} 字节，超过上限 {MAX_DATA_BYTES}。")
    return p


def load_user(path: str | Path, task: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The user's file as the trial's arrays, and the configuration they imply."""
    p = check_path(path)
    name = p.name
    spec = dict(DEFAULTS[task])
    try:
        if p.suffix.lower() == ".csv":
            if task != "mlp":
                raise _refuse("trial_data_task", f"{name}: a CSV file is tabular data; use --task mlp.",
                              f"{name}：CSV 是表格数据，请用 --task mlp。")
            with open(p, encoding="utf-8") as fh:
                first = fh.readline()
            skip = 1 if any(ch.isalpha() for ch in first.replace("e", "").replace("E", "")) else 0
            table = np.loadtxt(p, delimiter=",", skiprows=skip, dtype=np.float64, ndmin=2)
            arrays: dict[str, np.ndarray] = {"x": table[:, :-1].astype(np.float32), "y": table[:, -1]}
        else:
            with np.load(p, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
    except UserError:
        raise
    except ValueError as exc:
        raise _refuse("trial_data_unreadable", f"{name}: cannot read it as numbers ({exc}).",
                      f"{name}：无法读成数值（{exc}）。") from None
    except (OSError, EOFError) as exc:
        raise _refuse("trial_data_unreadable", f"{name}: cannot read it ({exc}).", f"{name}：无法读取（{exc}）。") from None
    return _shape(arrays, task, spec, name)


def _shape(arrays: dict[str, np.ndarray], task: str, spec: dict[str, Any], name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    def bad(en: str, zh: str) -> UserError:
        return _refuse("trial_data_shape", f"{name}: {en}", f"{name}：{zh}")

    if task == "lm":
        if "tokens" not in arrays:
            raise bad("an NPZ for the language model needs an integer array 'tokens' (n, seq_len + 1).",
                      "语言模型的 NPZ 需要整数数组 'tokens'，形状 (n, seq_len + 1)。")
        tok = arrays["tokens"]
        if tok.ndim != 2 or tok.shape[1] < 3 or tok.dtype.kind not in "iu" or tok.min() < 0:
            raise bad("'tokens' must be a 2-D array of non-negative integers with at least 3 columns.",
                      "'tokens' 必须是至少 3 列的二维非负整数数组。")
        _count(len(tok), name)
        spec.update(samples=len(tok), seq_len=int(tok.shape[1] - 1), vocab=int(tok.max()) + 1)
        if spec["vocab"] > 65536:
            raise bad("token ids above 65535.", "token id 超过 65535。")
        return {"tokens": tok.astype(np.int64)}, spec
    if "x" not in arrays or "y" not in arrays:
        raise bad("the data need 'x' (features) and 'y' (integer labels).", "数据需要 'x'（特征）和 'y'（整数标签）。")
    x, y = np.asarray(arrays["x"]), np.asarray(arrays["y"])
    if x.dtype.kind not in "fiu" or y.dtype.kind not in "fiu":
        raise bad("'x' and 'y' must be numbers.", "'x' 和 'y' 必须是数值。")
    if len(x) != len(y) or y.ndim != 1:
        raise bad(f"'x' has {len(x)} rows and 'y' {len(y)} (one label per row expected).",
                  f"'x' 有 {len(x)} 行，'y' 有 {len(y)} 个（每行一个标签）。")
    if not np.all(np.isfinite(x)):
        raise bad("'x' holds NaN or infinite values.", "'x' 含有 NaN 或无穷值。")
    if not np.all(np.equal(np.mod(y, 1), 0)) or y.min() < 0 or y.max() >= MAX_CLASSES:
        raise bad(f"labels must be integers 0..{MAX_CLASSES - 1}.", f"标签必须是 0..{MAX_CLASSES - 1} 的整数。")
    _count(len(x), name)
    if task == "mlp":
        if x.ndim != 2 or not 1 <= x.shape[1] <= MAX_FEATURES:
            raise bad(f"'x' must be (n, features) with 1..{MAX_FEATURES} features.",
                      f"'x' 的形状必须是 (n, features)，特征数 1..{MAX_FEATURES}。")
        spec["features"] = int(x.shape[1])
    else:
        if x.ndim != 4 or x.shape[1] != x.shape[2] or x.shape[1] % 4 or x.shape[3] > 16:
            raise bad("'x' must be square images (n, size, size, channels), size a multiple of 4 (NHWC).",
                      "'x' 必须是方形图像 (n, size, size, channels)，size 为 4 的倍数（NHWC）。")
        spec.update(size=int(x.shape[1]), channels=int(x.shape[3]))
    spec.update(samples=len(x), classes=max(2, int(y.max()) + 1))
    return {"x": x.astype(np.float32), "y": y.astype(np.int64)}, spec


def _count(n: int, name: str) -> None:
    if not MIN_SAMPLES <= n <= MAX_SAMPLES:
        raise _refuse("trial_data_size", f"{name}: {n} samples; between {MIN_SAMPLES} and {MAX_SAMPLES} are needed.",
                      f"{name}：{n} 个样本；需要 {MIN_SAMPLES} 到 {MAX_SAMPLES} 个。")


def write(arrays: dict[str, np.ndarray], target: Path) -> Path:
    np.savez(target, **arrays)  # type: ignore[arg-type]
    return target
