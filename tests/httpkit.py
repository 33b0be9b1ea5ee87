"""HTTP test helpers shared by the in-process API tests (tests/test_api.py) and the real-server tests
(tests/test_serve.py): a parser for text/event-stream bodies, the JSON error shape, and
`python -m assistant serve` run as a real subprocess on a free loopback port."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, object]]:
    """(event, parsed data) from the lines of a text/event-stream body; comments (pings) skipped.
    Every data line must be JSON, and every event must end with a blank line (checked by the caller's count)."""
    event, data = "message", []
    for line in lines:
        if line == "":
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        else:
            raise AssertionError(f"not an SSE field line: {line!r}")
    assert not data, f"an event without its closing blank line: {data}"


def error_of(r: httpx.Response) -> dict[str, str]:
    """The {"error": {"code", "message"}} body of a failed request, checked for shape and no traceback."""
    body = r.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] and body["error"]["message"], body
    assert "Traceback" not in r.text
    return body["error"]


class ServerProcess:
    """`python -m assistant serve` on a free loopback port; start() waits for /readyz."""

    def __init__(self, index_dir: Path, state_dir: Path, log_path: Path, **env: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {**os.environ, "ASSISTANT_INDEX_DIR": str(index_dir), "ASSISTANT_STATE_DIR": str(state_dir),
                    **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 300) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting (several servers then load side by side; wait_ready each)."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "assistant", "serve", "--port", str(self.port)],
                                         cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 300) -> None:
        """Until /healthz and then /readyz answer 200; a RuntimeError naming the log if the process exits first."""
        assert self.proc is not None, "launch() first"
        deadline = time.monotonic() + timeout
        healthy = False
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}); log: {self.log_path}")
            try:
                healthy = healthy or httpx.get(self.base + "/healthz", timeout=2).status_code == 200
                if httpx.get(self.base + "/readyz", timeout=2).status_code == 200:
                    assert healthy
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"server not ready after {timeout} s; log: {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class ThreadServer:
    """An ASGI app under a real uvicorn server in a thread on a free loopback port (in-process tests that need
    real HTTP: disconnects, concurrent clients). `start()` waits until it listens; `stop()` ends it."""

    def __init__(self, app: object) -> None:
        import threading

        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn-test", daemon=True)

    def start(self) -> ThreadServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
