"""Access (issue 17, items 1-2): API keys on every route but the probes, the browser login, the Host allow-list,
sessions that belong to the key that made them, and `serve` refusing a public address without keys.

The real service in process (real index, real embedder, real SQLite) with ScriptedChatModel as the model,
the real app from ui.server.create_app (Gradio UI included) under Starlette's TestClient."""
from __future__ import annotations

import logging
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import gradio as gr
import httpx
import pytest
from fastapi.testclient import TestClient

from assistant.keys import KeyRing, hash_key, hash_keys, owner_id
from assistant.llm.scripted import ScriptedChatModel
from assistant.service import AssistantService
from assistant.sessions import SessionStore
from assistant.settings import load_settings
from ui.auth import COOKIE, Access
from ui.server import create_app
from ui.web import ChatHandlers

REPO = Path(__file__).resolve().parents[1]
KEY_A = "ka-" + "7" * 29  # values a test can search for in logs, URLs and files
KEY_B = "kb-" + "9" * 29
BASE = "http://127.0.0.1:7860"
QUESTION = "What does DeepSpeed ZeRO partition?"
_SOURCE = re.compile(r"^\[1\] (.+?[.。!?！？])", re.MULTILINE)


def _quote_first_source(messages: list[dict[str, str]]) -> str:
    m = _SOURCE.search(messages[-1]["content"])
    return f"{m.group(1)}[1]" if m else "No sources."


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def error_of(r: httpx.Response) -> dict[str, str]:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return body["error"]


class Seen:
    """Every URL the client requested and every Location it was sent to (the key must be in none)."""

    def __init__(self) -> None:
        self.urls: list[str] = []

    def request(self, req: httpx.Request) -> None:
        self.urls.append(str(req.url))

    def response(self, resp: httpx.Response) -> None:
        self.urls.append(resp.headers.get("location", ""))


@pytest.fixture(scope="module")
def keyed(corpus_index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AssistantService]:
    settings = load_settings(index_dir=corpus_index, state_dir=tmp_path_factory.mktemp("state-keyed"),
                             model="fast", api_keys=f"{KEY_A}, {KEY_B}")
    svc = AssistantService(settings, chat_model=ScriptedChatModel(_quote_first_source))
    svc.load(warm=False)
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def app(keyed: AssistantService):
    return create_app(keyed, load=False)  # with the Gradio UI


@pytest.fixture()
def seen() -> Seen:
    return Seen()


@pytest.fixture()
def client(app, seen: Seen) -> TestClient:
    c = TestClient(app, base_url=BASE, follow_redirects=False)
    c.event_hooks = {"request": [seen.request], "response": [seen.response]}
    return c


PROTECTED = [("GET", "/api/sessions/" + "a" * 32), ("POST", "/api/ask"), ("POST", "/api/search"),
             ("POST", "/api/feedback"), ("DELETE", "/api/sessions/" + "a" * 32), ("POST", "/api/advise"),
             ("GET", "/api/passages/x"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
             ("GET", "/metrics"), ("GET", "/docs"), ("GET", "/openapi.json"), ("GET", "/"), ("GET", "/config"),
             ("POST", "/gradio_api/queue/join"), ("GET", "/gradio_api/info")]


def test_every_route_but_the_probes_needs_a_key(client: TestClient) -> None:
    for method, path in PROTECTED:
        for headers in ({}, bearer("wrong-key"), {"Authorization": KEY_A}, {"Authorization": "Basic " + KEY_A}):
            r = client.request(method, path, headers=headers, json={})
            assert r.status_code == 401, (method, path, headers, r.status_code)
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert error_of(r)["code"] == "unauthorized"
    r = client.get("/metrics", headers={"Accept-Language": "zh-CN"})
    assert "需要 API 密钥" in error_of(r)["message"]
    for path in ("/healthz", "/readyz"):
        assert client.get(path).status_code == 200


def test_a_right_key_opens_every_route(client: TestClient) -> None:
    for key in (KEY_A, KEY_B):
        for path in ("/v1/models", "/metrics", "/docs", "/openapi.json", "/", "/config"):
            r = client.get(path, headers=bearer(key))
            assert r.status_code == 200, (path, r.status_code)
        r = client.post("/api/search", json={"query": "ZeRO", "k": 2}, headers=bearer(key))
        assert r.status_code == 200 and len(r.json()["results"]) == 2
    spec = client.get("/openapi.json", headers=bearer(KEY_A)).json()  # /docs can send the key
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert spec["paths"]["/api/ask"]["post"]["security"] == [{"HTTPBearer": []}]


def test_browser_login_cookie_and_logout(client: TestClient, seen: Seen, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    page = client.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 303 and page.headers["location"] == "/login"
    docs = client.get("/docs", headers={"Accept": "text/html"})
    assert docs.status_code == 303 and docs.headers["location"] == "/login?next=/docs"
    form = client.get("/login")
    assert form.status_code == 200 and 'method="post"' in form.text and 'type="password"' in form.text
    bad = client.post("/login", data={"key": "not-a-key"})
    assert bad.status_code == 401 and COOKIE not in bad.cookies
    ok = client.post("/login", data={"key": KEY_A, "next": "/docs"})
    assert ok.status_code == 303 and ok.headers["location"] == "/docs"
    set_cookie = ok.headers["set-cookie"]
    assert "httponly" in set_cookie.lower() and "samesite=strict" in set_cookie.lower()
    token = client.cookies[COOKIE]
    assert KEY_A not in set_cookie and hash_key(KEY_A).split(":")[1] not in set_cookie and len(token) >= 32
    assert client.post("/login", data={"key": KEY_A, "next": "//evil.example/x"}).headers["location"] == "/"
    # the cookie opens the UI (its page and config), and the API and docs for the browser
    ui = client.get("/", headers={"Accept": "text/html"})
    assert ui.status_code == 200 and "gradio" in ui.text.lower()
    assert client.get("/config").status_code == 200 and client.get("/docs").status_code == 200
    asked = client.post("/api/ask", json={"question": QUESTION})
    assert asked.status_code == 200
    # the login's session is key A's: key B cannot read it
    sid = asked.json()["session_id"]
    assert client.get(f"/api/sessions/{sid}", headers=bearer(KEY_B)).status_code == 404
    out = client.get("/logout")
    assert out.status_code == 303 and out.headers["location"] == "/login"
    assert client.get("/config").status_code == 401
    client.cookies.set(COOKIE, token)  # a token once logged out stays dead
    assert client.get("/config").status_code == 401
    # the key was in no URL and no log line (nor the login token)
    assert seen.urls and not any(KEY_A in u or token in u for u in seen.urls)
    lines = [rec.getMessage() for rec in caplog.records]
    assert not any(KEY_A in line or KEY_B in line or token in line for line in lines)


def test_keys_are_kept_only_as_hashes(keyed: AssistantService, app) -> None:
    s = keyed.settings
    assert s.api_keys == (hash_key(KEY_A), hash_key(KEY_B))
    for text in (repr(s), str(s), s.model_dump_json()):
        assert KEY_A not in text and KEY_B not in text
    access: Access = app.state.access
    assert access.keys.match(KEY_A) == owner_id(hash_key(KEY_A)) and access.keys.match(KEY_A + "x") is None
    assert hash_keys([hash_key(KEY_A)]) == (hash_key(KEY_A),)  # re-validated settings are not hashed twice
    keyed.ask(QUESTION, owner=owner_id(hash_key(KEY_A)))
    raw = (Path(s.state_dir) / "assistant.db").read_bytes()
    assert KEY_A.encode() not in raw and hash_key(KEY_A).encode() not in raw


def test_keys_from_the_environment_and_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text("# team keys\nfile-key-1\n\n  file-key-2  \n", encoding="utf-8")
    monkeypatch.setenv("ASSISTANT_API_KEYS", "env-key-1,env-key-2")
    monkeypatch.setenv("ASSISTANT_API_KEYS_FILE", str(keys_file))
    monkeypatch.setenv("ASSISTANT_ALLOWED_HOSTS", "Advisor.Example, 10.0.0.5")
    s = load_settings()
    ring = KeyRing.from_settings(s)
    assert len(ring) == 4 and all(ring.match(k) for k in ("env-key-1", "env-key-2", "file-key-1", "file-key-2"))
    assert ring.match("# team keys") is None and ring.match("") is None
    assert s.allowed_hosts == ["advisor.example", "10.0.0.5"]
    monkeypatch.setenv("ASSISTANT_API_KEYS_FILE", str(tmp_path / "missing.txt"))
    with pytest.raises(Exception, match="API keys file"):
        KeyRing.from_settings(load_settings())
    monkeypatch.delenv("ASSISTANT_API_KEYS")
    monkeypatch.delenv("ASSISTANT_API_KEYS_FILE")
    assert not KeyRing.from_settings(load_settings()).enabled  # no default secret


def test_sessions_belong_to_the_key_that_made_them(client: TestClient) -> None:
    a, b = bearer(KEY_A), bearer(KEY_B)
    first = client.post("/api/ask", json={"question": QUESTION}, headers=a).json()
    sid, mid = first["session_id"], first["message_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", sid) and re.fullmatch(r"[0-9a-f]{32}", mid)
    # key B: read, continue (native and OpenAI), stream, delete, feedback are all 404
    assert client.get(f"/api/sessions/{sid}", headers=b).status_code == 404
    r = client.post("/api/ask", json={"question": "And offload?", "session_id": sid}, headers=b)
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    r = client.post("/api/ask", json={"question": "And offload?", "session_id": sid, "stream": True}, headers=b)
    assert r.status_code == 404
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "And offload?"}],
                                                  "session_id": sid}, headers=b)
    assert r.status_code == 404
    assert client.delete(f"/api/sessions/{sid}", headers=b).status_code == 404
    r = client.post("/api/feedback", json={"session_id": sid, "message_id": mid, "rating": "down"}, headers=b)
    assert r.status_code == 404
    # key A still has it all, and continues it (the OpenAI way: the session_id extension field)
    sess = client.get(f"/api/sessions/{sid}", headers=a).json()
    assert [m["role"] for m in sess["messages"]] == ["user", "assistant"] and sess["feedback"] == []
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "And offload?"}],
                                                  "session_id": sid, "user": "someone"}, headers=a)
    assert r.status_code == 200 and r.json()["session_id"] == sid
    # `user` is not a session id: a completion with only `user` starts a new session
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": QUESTION}],
                                                  "user": sid}, headers=a)
    assert r.status_code == 200 and r.json()["session_id"] != sid
    assert client.post("/api/feedback", json={"session_id": sid, "message_id": mid, "rating": "up"},
                       headers=a).status_code == 200
    assert len(client.get(f"/api/sessions/{sid}", headers=a).json()["messages"]) == 4
    assert client.delete(f"/api/sessions/{sid}", headers=a).json() == {"deleted": sid}
    assert client.get(f"/api/sessions/{sid}", headers=a).status_code == 404


def test_only_the_server_issues_session_ids(client: TestClient) -> None:
    a = bearer(KEY_A)
    made_up = "ab" * 16  # well-formed, never issued
    r = client.post("/api/ask", json={"question": QUESTION, "session_id": made_up}, headers=a)
    assert r.status_code == 404 and "32" in error_of(r)["message"]
    assert client.get(f"/api/sessions/{made_up}", headers=a).status_code == 404
    for bad in ("my-session", "AB" * 16, "a" * 33, "../" * 4):
        r = client.post("/api/ask", json={"question": QUESTION, "session_id": bad}, headers=a)
        assert r.status_code == 422 and "session_id" in error_of(r)["message"], bad
        r = client.post("/api/feedback", json={"session_id": bad, "message_id": "a" * 32, "rating": "up"}, headers=a)
        assert r.status_code == 422
    r = client.get("/api/sessions/my-session", headers={**a, "Accept-Language": "zh"})
    assert r.status_code == 404 and "十六进制" in error_of(r)["message"]
    # nothing was created under the made-up id
    assert client.get(f"/api/sessions/{made_up}", headers=a).status_code == 404


def test_the_ui_handlers_act_as_the_logged_in_key(keyed: AssistantService, app, client: TestClient) -> None:
    a_sid = client.post("/api/ask", json={"question": QUESTION}, headers=bearer(KEY_A)).json()["session_id"]
    client.post("/login", data={"key": KEY_B})
    as_b = gr.Request(headers={"cookie": f"{COOKIE}={client.cookies[COOKIE]}"})
    handlers = ChatHandlers(keyed, app.state.access)
    *_, last = handlers.respond("And offload?", [], a_sid, "en", request=as_b)
    assert "Unknown session" in last[0][-1]["content"]  # B cannot continue A's chat from the UI either
    *_, last = handlers.respond(QUESTION, [], "", "en", request=as_b)
    b_sid = last[3]
    assert b_sid != a_sid and keyed.get_session(b_sid, owner=owner_id(hash_key(KEY_B))) is not None
    assert keyed.get_session(b_sid, owner=owner_id(hash_key(KEY_A))) is None
    assert "sign in" in handlers.rate("up", b_sid, last[4], "en", gr.Request(headers={}))  # no login: refused
    assert handlers.rate("up", b_sid, last[4], "en", as_b) == "Feedback saved, thank you!"


def test_host_allow_list(client: TestClient, keyed: AssistantService) -> None:
    for host in ("evil.example", "evil.example:7860", "127.0.0.1.evil.example", "localhost.evil"):
        r = client.get("/healthz", headers={"Host": host})
        assert r.status_code == 421 and error_of(r)["code"] == "bad_host", host
        assert client.get("/v1/models", headers={**bearer(KEY_A), "Host": host}).status_code == 421
    for host in ("127.0.0.1", "127.0.0.1:7860", "localhost:9", "LOCALHOST", "[::1]:7860", "[::1]"):
        assert client.get("/healthz", headers={"Host": host}).status_code == 200, host
    # the setting: only the listed names; and a keyless app (one local user) needs no key
    other = create_app(keyed, with_ui=False, load=False,
                       access=Access.from_settings(load_settings(allowed_hosts="advisor.example")))
    c = TestClient(other, base_url="http://advisor.example:8080")
    assert c.get("/v1/models").status_code == 200
    assert c.get("/v1/models", headers={"Host": "localhost"}).status_code == 421
    sid = c.post("/api/ask", json={"question": QUESTION}).json()["session_id"]
    assert c.get(f"/api/sessions/{sid}").status_code == 200
    assert c.post("/api/ask", json={"question": QUESTION, "session_id": "cd" * 16}).status_code == 404


def test_old_session_files_are_migrated(tmp_path: Path) -> None:
    db = tmp_path / "assistant.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE sessions (id TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL);"
                      "INSERT INTO sessions VALUES ('0123456789abcdef', 1, 1);")
    con.commit()
    con.close()
    store = SessionStore(db)
    try:
        assert store.get("0123456789abcdef") is not None  # the keyless local user still has it
        assert store.get("0123456789abcdef", owner_id(hash_key(KEY_A))) is None  # no key does
        assert len(store.ensure(None, "owner-a")) == 32
    finally:
        store.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_refuses_a_public_address_without_keys(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASSISTANT_")}
    env.update(PYTHONPATH=str(REPO), ASSISTANT_STATE_DIR=str(tmp_path / "state"),
               ASSISTANT_INDEX_DIR=str(tmp_path / "index"))
    port = _free_port()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "assistant", "serve", "--host", "0.0.0.0", "--port", str(port)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "refusing to serve on 0.0.0.0" in proc.stderr and "ASSISTANT_API_KEYS" in proc.stderr
    assert "拒绝" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - started < 30  # before any model or index loads
    assert not (tmp_path / "state").exists()  # nothing was opened
