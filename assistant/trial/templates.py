"""The reviewed training scripts: one per framework x task, rendered, never written by a model.

A script is the common prelude (standard library + NumPy, the same for every framework: the run's
configuration, the data loader, the step log) followed by the framework's part, which is what a user would
write and what the trial measures: its lines of code (`loc`, blank lines and comments not counted), the
framework concepts it needed (reviewed, listed with the template) and the distinct framework API names it
calls (`api_names`, counted from the code). Every framework part builds the same model (sizes from the
configuration), the same optimizer (Adam), the same loss (softmax cross-entropy), reads the same batches in
the same order and logs one line per step with `log(event="step", ...)`.

The framework part marks one line inside its training step, `# PROBE`, where the debuggability probes put
`print(loss)` or `breakpoint()`, so that they run exactly as a user would write them. The data come from an
NPZ file the trial writes (trial/data.py); every value the script needs is a literal in it, so the rendered
script runs on its own with the environment's python.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

FRAMEWORKS = ("pytorch", "jax", "tensorflow", "paddlepaddle")
TASKS = ("mlp", "lm", "cnn")
PROBES = ("print", "pdb", "shape")
MARKER = "# PROBE"

PRELUDE = '''\
# --- common to every framework (not counted): configuration, data, the step log ---
import json
import resource
import sys
import time

import numpy as np

T0 = time.perf_counter()
CFG = json.loads(r"""{config}""")


def log(**event):
    print("TRIAL " + json.dumps(event | {{"t": round(time.perf_counter() - T0, 6)}}), flush=True)


def batches(cfg):
    """(x, y) NumPy batches in one seeded order, the same for every framework; forever."""
    data = np.load(cfg["data"], allow_pickle=False)
    if cfg["task"] == "lm":
        x, y = data["tokens"][:, :-1], data["tokens"][:, 1:]
    else:
        x, y = data["x"], data["y"]
    rng = np.random.default_rng(cfg["seed"])
    b = cfg["batch"]
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(x) - b + 1, b):
            bx, by = x[order[i:i + b]], y[order[i:i + b]]
            yield (bx, by[:-1]) if cfg.get("probe") == "shape" else (bx, by)


def finish():
    log(event="end", peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))


log(event="start", python=sys.version.split()[0])
# --- the framework's part (counted) ---
'''

LOOP = '''
for step, (x, y) in zip(range(CFG["steps"]), batches(CFG)):
    loss = train_step({args})
    log(event="step", step=step, loss=float(loss))
finish()
'''

# ---- PyTorch -------------------------------------------------------------------------------------
_TORCH_HEAD = '''\
import torch
from torch import nn

log(event="imported", version=torch.__version__)
torch.manual_seed(CFG["seed"])
torch.set_num_threads(CFG["threads"])
device = "cuda" if torch.cuda.is_available() else "cpu"
'''
_TORCH_STEP = '''
optimizer = torch.optim.Adam(model.parameters(), lr=CFG["lr"])
loss_fn = nn.CrossEntropyLoss()


def train_step(x, y):
    x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
    optimizer.zero_grad()
    logits = model(x)
    loss = loss_fn(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    # PROBE
    loss.backward()
    optimizer.step()
    return loss.item()
'''
TORCH = {
    "mlp": _TORCH_HEAD + '''
model = nn.Sequential(
    nn.Linear(CFG["features"], CFG["hidden"]), nn.ReLU(),
    nn.Linear(CFG["hidden"], CFG["hidden"]), nn.ReLU(),
    nn.Linear(CFG["hidden"], CFG["classes"]),
).to(device)
''' + _TORCH_STEP,
    "cnn": _TORCH_HEAD + '''
model = nn.Sequential(
    nn.Conv2d(CFG["channels"], 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(16 * (CFG["size"] // 4) ** 2, CFG["classes"]),
).to(device)
''' + _TORCH_STEP.replace("torch.from_numpy(x).to(device)", "torch.from_numpy(x).permute(0, 3, 1, 2).to(device)"),
    "lm": _TORCH_HEAD + '''

class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        d = CFG["d_model"]
        self.tok = nn.Embedding(CFG["vocab"], d)
        self.pos = nn.Embedding(CFG["seq_len"], d)
        layer = nn.TransformerEncoderLayer(d, CFG["heads"], CFG["ff"], dropout=0.0, batch_first=True,
                                           norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, CFG["layers"], enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, CFG["vocab"])

    def forward(self, ids):
        t = ids.shape[1]
        h = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=ids.device)
        return self.head(self.norm(self.blocks(h, mask=mask, is_causal=True)))


model = TinyLM().to(device)
''' + _TORCH_STEP,
}

# ---- JAX (Flax NNX + Optax) ---------------------------------------------------------------------
_JAX_HEAD = '''\
import jax
import optax
from flax import nnx

log(event="imported", version=jax.__version__)
'''
_JAX_STEP = '''
model = {model}(nnx.Rngs(CFG["seed"]))
optimizer = nnx.Optimizer(model, optax.adam(CFG["lr"]), wrt=nnx.Param)


def loss_fn(model, x, y):
    logits = model(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


@nnx.jit
def train_step(model, optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    # PROBE
    optimizer.update(model, grads)
    return loss
'''
JAX = {
    "mlp": _JAX_HEAD + '''

class MLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(CFG["features"], CFG["hidden"], rngs=rngs)
        self.l2 = nnx.Linear(CFG["hidden"], CFG["hidden"], rngs=rngs)
        self.out = nnx.Linear(CFG["hidden"], CFG["classes"], rngs=rngs)

    def __call__(self, x):
        return self.out(nnx.relu(self.l2(nnx.relu(self.l1(x)))))

''' + _JAX_STEP.format(model="MLP"),
    "cnn": _JAX_HEAD + '''

class CNN(nnx.Module):
    def __init__(self, rngs):
        self.c1 = nnx.Conv(CFG["channels"], 8, (3, 3), padding="SAME", rngs=rngs)
        self.c2 = nnx.Conv(8, 16, (3, 3), padding="SAME", rngs=rngs)
        self.out = nnx.Linear(16 * (CFG["size"] // 4) ** 2, CFG["classes"], rngs=rngs)

    def __call__(self, x):
        x = nnx.max_pool(nnx.relu(self.c1(x)), (2, 2), (2, 2))
        x = nnx.max_pool(nnx.relu(self.c2(x)), (2, 2), (2, 2))
        return self.out(x.reshape(x.shape[0], -1))

''' + _JAX_STEP.format(model="CNN"),
    "lm": _JAX_HEAD + '''

class Block(nnx.Module):
    def __init__(self, rngs):
        d = CFG["d_model"]
        self.norm1, self.norm2 = nnx.LayerNorm(d, rngs=rngs), nnx.LayerNorm(d, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(CFG["heads"], d, decode=False, rngs=rngs)
        self.ff1, self.ff2 = nnx.Linear(d, CFG["ff"], rngs=rngs), nnx.Linear(CFG["ff"], d, rngs=rngs)

    def __call__(self, h, mask):
        h = h + self.attn(self.norm1(h), mask=mask)
        return h + self.ff2(nnx.relu(self.ff1(self.norm2(h))))


class TinyLM(nnx.Module):
    def __init__(self, rngs):
        d = CFG["d_model"]
        self.tok = nnx.Embed(CFG["vocab"], d, rngs=rngs)
        self.pos = nnx.Embed(CFG["seq_len"], d, rngs=rngs)
        self.blocks = nnx.List([Block(rngs) for _ in range(CFG["layers"])])
        self.norm = nnx.LayerNorm(d, rngs=rngs)
        self.head = nnx.Linear(d, CFG["vocab"], rngs=rngs)

    def __call__(self, ids):
        h = self.tok(ids) + self.pos(jax.numpy.arange(ids.shape[1]))
        mask = nnx.make_causal_mask(ids)
        for block in self.blocks:
            h = block(h, mask)
        return self.head(self.norm(h))

''' + _JAX_STEP.format(model="TinyLM"),
}

# ---- TensorFlow (Keras layers, a tf.function training step) --------------------------------------
_TF_HEAD = '''\
import tensorflow as tf

log(event="imported", version=tf.__version__)
tf.keras.utils.set_random_seed(CFG["seed"])
tf.config.threading.set_intra_op_parallelism_threads(CFG["threads"])
tf.config.threading.set_inter_op_parallelism_threads(CFG["threads"])
'''
_TF_STEP = '''
optimizer = tf.keras.optimizers.Adam(CFG["lr"])
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
        # PROBE
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
'''
TF = {
    "mlp": _TF_HEAD + '''
model = tf.keras.Sequential([
    tf.keras.Input((CFG["features"],)),
    tf.keras.layers.Dense(CFG["hidden"], activation="relu"),
    tf.keras.layers.Dense(CFG["hidden"], activation="relu"),
    tf.keras.layers.Dense(CFG["classes"]),
])
''' + _TF_STEP,
    "cnn": _TF_HEAD + '''
model = tf.keras.Sequential([
    tf.keras.Input((CFG["size"], CFG["size"], CFG["channels"])),
    tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu"), tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu"), tf.keras.layers.MaxPooling2D(),
    tf.keras.layers.Flatten(), tf.keras.layers.Dense(CFG["classes"]),
])
''' + _TF_STEP,
    "lm": _TF_HEAD + '''
layers = tf.keras.layers


class Block(layers.Layer):
    def __init__(self):
        super().__init__()
        d = CFG["d_model"]
        self.norm1, self.norm2 = layers.LayerNormalization(), layers.LayerNormalization()
        self.attn = layers.MultiHeadAttention(CFG["heads"], d // CFG["heads"])
        self.ff1, self.ff2 = layers.Dense(CFG["ff"], activation="relu"), layers.Dense(d)

    def call(self, h):
        x = self.norm1(h)
        h = h + self.attn(x, x, use_causal_mask=True)
        return h + self.ff2(self.ff1(self.norm2(h)))


class TinyLM(tf.keras.Model):
    def __init__(self):
        super().__init__()
        self.tok = layers.Embedding(CFG["vocab"], CFG["d_model"])
        self.pos = layers.Embedding(CFG["seq_len"], CFG["d_model"])
        self.blocks = [Block() for _ in range(CFG["layers"])]
        self.norm = layers.LayerNormalization()
        self.head = layers.Dense(CFG["vocab"])

    def call(self, ids):
        h = self.tok(ids) + self.pos(tf.range(tf.shape(ids)[1]))
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


model = TinyLM()
''' + _TF_STEP,
}

# ---- PaddlePaddle (dynamic graph) ----------------------------------------------------------------
_PADDLE_HEAD = '''\
import paddle
from paddle import nn

log(event="imported", version=paddle.__version__)
paddle.seed(CFG["seed"])
paddle.set_device("gpu" if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() else "cpu")
'''
_PADDLE_STEP = '''
optimizer = paddle.optimizer.Adam(learning_rate=CFG["lr"], parameters=model.parameters())
loss_fn = nn.CrossEntropyLoss()


def train_step(x, y):
    x, y = paddle.to_tensor(x), paddle.to_tensor(y)
    logits = model(x)
    loss = loss_fn(logits.reshape([-1, logits.shape[-1]]), y.reshape([-1]))
    # PROBE
    loss.backward()
    optimizer.step()
    optimizer.clear_grad()
    return loss.item()
'''
PADDLE = {
    "mlp": _PADDLE_HEAD + '''
model = nn.Sequential(
    nn.Linear(CFG["features"], CFG["hidden"]), nn.ReLU(),
    nn.Linear(CFG["hidden"], CFG["hidden"]), nn.ReLU(),
    nn.Linear(CFG["hidden"], CFG["classes"]),
)
''' + _PADDLE_STEP,
    "cnn": _PADDLE_HEAD + '''
model = nn.Sequential(
    nn.Conv2D(CFG["channels"], 8, 3, padding=1), nn.ReLU(), nn.MaxPool2D(2),
    nn.Conv2D(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2D(2),
    nn.Flatten(), nn.Linear(16 * (CFG["size"] // 4) ** 2, CFG["classes"]),
)
''' + _PADDLE_STEP.replace("paddle.to_tensor(x)", "paddle.to_tensor(x).transpose([0, 3, 1, 2])"),
    "lm": _PADDLE_HEAD + '''

class TinyLM(nn.Layer):
    def __init__(self):
        super().__init__()
        d = CFG["d_model"]
        self.tok = nn.Embedding(CFG["vocab"], d)
        self.pos = nn.Embedding(CFG["seq_len"], d)
        layer = nn.TransformerEncoderLayer(d, CFG["heads"], CFG["ff"], dropout=0.0, normalize_before=True)
        self.blocks = nn.TransformerEncoder(layer, CFG["layers"])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, CFG["vocab"])

    def forward(self, ids):
        t = ids.shape[1]
        h = self.tok(ids) + self.pos(paddle.arange(t))
        mask = paddle.triu(paddle.full([t, t], float("-inf")), 1)
        return self.head(self.norm(self.blocks(h, src_mask=mask)))


model = TinyLM()
''' + _PADDLE_STEP,
}

BODIES: dict[str, dict[str, str]] = {"pytorch": TORCH, "jax": JAX, "tensorflow": TF, "paddlepaddle": PADDLE}
STEP_ARGS = {"pytorch": "x, y", "jax": "model, optimizer, x, y", "tensorflow": "x, y", "paddlepaddle": "x, y"}
# the modules whose attributes count as the framework's API
API_ROOTS = {"pytorch": ("torch", "nn"), "jax": ("jax", "nnx", "optax"), "tensorflow": ("tf", "layers"),
             "paddlepaddle": ("paddle", "nn")}

# Reviewed: what a reader must understand to write the script, beyond Python and NumPy.
CONCEPTS: dict[str, dict[str, list[str]]] = {
    "pytorch": {"en": ["nn.Module / nn.Sequential layers", "tensors from NumPy (torch.from_numpy) and device placement",
                       "optimizer.zero_grad() / loss.backward() / optimizer.step()"],
                "zh": ["nn.Module / nn.Sequential 层", "从 NumPy 建张量（torch.from_numpy）与设备放置",
                       "optimizer.zero_grad() / loss.backward() / optimizer.step()"]},
    "jax": {"en": ["nnx.Module with explicit random keys (nnx.Rngs)", "a pure loss function of (model, batch)",
                   "transformations: nnx.value_and_grad, nnx.jit (tracing and compilation)",
                   "Optax optimizer wrapped by nnx.Optimizer(wrt=nnx.Param), updated with the gradients"],
            "zh": ["带显式随机数键的 nnx.Module（nnx.Rngs）", "以 (model, batch) 为参数的纯函数损失",
                   "函数变换：nnx.value_and_grad、nnx.jit（追踪与编译）", "Optax 优化器由 nnx.Optimizer(wrt=nnx.Param) 包装并用梯度更新"]},
    "tensorflow": {"en": ["Keras layers / Sequential or a subclassed Model", "tf.GradientTape for gradients",
                          "@tf.function (traced into a graph)", "optimizer.apply_gradients(zip(grads, variables))"],
                   "zh": ["Keras 层 / Sequential 或子类化 Model", "用 tf.GradientTape 求梯度", "@tf.function（追踪成计算图）",
                          "optimizer.apply_gradients(zip(grads, variables))"]},
    "paddlepaddle": {"en": ["nn.Layer / nn.Sequential layers", "tensors from NumPy (paddle.to_tensor)",
                            "loss.backward() / optimizer.step() / optimizer.clear_grad()"],
                     "zh": ["nn.Layer / nn.Sequential 层", "从 NumPy 建张量（paddle.to_tensor）",
                            "loss.backward() / optimizer.step() / optimizer.clear_grad()"]},
}
# Each framework's documented way to see values inside its compiled step (for the report's notes).
DEBUG_DOCS = {
    "pytorch": "eager by default: print and pdb see values at every step (torch.compile would trace instead)",
    "jax": "inside jit, print and pdb see tracers once, at tracing; JAX documents jax.debug.print and "
           "jax.debug.breakpoint for runtime values (https://docs.jax.dev/en/latest/debugging.html)",
    "tensorflow": "inside tf.function, print and pdb run once, at tracing, on symbolic tensors; TensorFlow documents "
                  "tf.print, or tf.config.run_functions_eagerly(True) for debugging",
    "paddlepaddle": "dynamic graph by default: print and pdb see values at every step (paddle.jit.to_static would "
                    "trace instead)",
}


@dataclass
class Script:
    framework: str
    task: str
    text: str  # the whole script as run
    body: str  # the framework's part (what LOC counts)
    probe: str | None

    @property
    def loc(self) -> int:
        return count_loc(self.body)

    @property
    def common_loc(self) -> int:
        return count_loc(self.text) - self.loc


def count_loc(code: str) -> int:
    """Lines that are code: not blank, not only a comment."""
    return sum(1 for line in code.splitlines() if line.strip() and not line.strip().startswith("#"))


def api_names(framework: str, code: str) -> list[str]:
    """The distinct framework names the code uses (torch.optim.Adam, nnx.jit, tf.GradientTape, ...)."""
    roots = API_ROOTS[framework]
    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Attribute):
            parts: list[str] = []
            cur: ast.AST = node
            while isinstance(cur, ast.Attribute):
                parts.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in roots:
                names.add(".".join([cur.id, *reversed(parts)]))
    # keep the longest chains only (tf.keras.layers.Dense, not also tf.keras)
    return sorted(n for n in names if not any(o != n and o.startswith(n + ".") for o in names))


def render(framework: str, task: str, config: dict[str, Any], probe: str | None = None) -> Script:
    """The script for one framework and task; `probe` puts print(loss) or breakpoint() in the step, or makes the
    labels one row short (a shape error), and is recorded in the configuration."""
    if framework not in BODIES or task not in BODIES[framework]:
        raise ValueError(f"no template for {framework}/{task}")
    if probe not in (None, *PROBES):
        raise ValueError(f"unknown probe {probe!r}")
    cfg = dict(config, task=task, probe=probe)
    body = BODIES[framework][task] + LOOP.format(args=STEP_ARGS[framework])
    line = {"print": "print(loss)", "pdb": "breakpoint()"}.get(probe or "")
    lines = []
    for raw in body.splitlines():
        if raw.strip() == MARKER:
            if line:
                lines.append(raw.replace(MARKER, line))
            continue
        lines.append(raw)
    body = "\n".join(lines) + "\n"
    config_json = json.dumps(cfg, sort_keys=True)
    if '"""' in config_json or re.search(r"[\r\n]", config_json):
        raise ValueError("configuration cannot be embedded")
    text = PRELUDE.format(config=config_json) + body
    ast.parse(text)  # a template that does not parse is a bug here, never in the child
    return Script(framework, task, text, body, probe)
