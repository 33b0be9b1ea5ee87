"""A real Chroma server for the tests: `chroma run --path DIR --host 127.0.0.1 --port N` (the CLI of the venv's
chromadb) on a free loopback port with a fresh temp directory, waited for by its heartbeat, stopped by its PID
(SIGTERM, then SIGKILL after 10 s), then the directory is removed. The session-scoped fixture is `chroma_server`
(tests/conftest.py); each test takes its own collection prefix (`chroma_prefix`), so they share one server."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from httpkit import free_port


def chroma_cli() -> Path | None:
    """The `chroma` executable beside this Python (the venv's), else None."""
    exe = Path(sys.executable).parent / "chroma"
    return exe if exe.is_file() else None


class ChromaServer:
    def __init__(self, cli: Path) -> None:
        self.cli = cli
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="advisor-chroma-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ChromaServer:
        t0 = time.perf_counter()
        log = open(self.dir / "server.log", "wb")  # noqa: SIM115 - the server's for its lifetime
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
        self.proc = subprocess.Popen([str(self.cli), "run", "--path", str(self.dir / "data"), "--host", "127.0.0.1",
                                      "--port", str(self.port)], stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/api/v2/heartbeat", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the Chroma server did not start: " + self.log_tail())
            time.sleep(0.1)
        self.start_seconds = time.perf_counter() - t0
        return self

    def log_tail(self) -> str:
        try:
            return (self.dir / "server.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def halt(self) -> None:
        """Stop the server process, keeping its data: start() brings it back on the same port and data."""
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)
            self.proc = None

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.dir, ignore_errors=True)
