"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`) as a real subprocess on a free
loopback port, serving one GGUF under an alias: the remote engine's real peer in the chat-model contract
(test_contract_chatmodel.py, with `tiny`) and in the remote answer path (test_remote.py, with `fast`)."""
from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from httpkit import free_port


@contextmanager
def llama_server(model_path: Path, alias: str, n_ctx: int = 1024, timeout: float = 120) -> Iterator[str]:
    """Yields the server's base URL (…/v1) once GET /models answers; the server is stopped by its PID after."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path), "--model_alias", alias,
         "--host", "127.0.0.1", "--port", str(port), "--n_threads", "2", "--n_ctx", str(n_ctx), "--verbose", "False"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(url + "/models", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(f"llama_cpp.server exited: {proc.stderr.read().decode()[-2000:]}") from None  # type: ignore[union-attr]
                if time.time() > deadline:
                    raise RuntimeError(f"llama_cpp.server not up after {timeout} s") from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
