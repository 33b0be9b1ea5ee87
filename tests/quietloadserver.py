"""`python -m assistant mcp` run so that the stdio transport takes stdin and stdout at the worst moment, if the model
load can overlap it: the transport's start waits until llama.cpp's quiet load (verbose=False points fd 1 at
/dev/null while a model loads) is under way, whenever the background load thread already runs by then. Where the
load begins only after the transport is up, nothing waits. Run by tests/test_mcp.py as a real subprocess."""
from __future__ import annotations

import sys
import threading
import time

import llama_cpp._utils as llama_utils

import ui.mcp_server as mcp_server
from assistant.cli import main

quiet = threading.Event()
enter_quiet = llama_utils.suppress_stdout_stderr.__enter__


def entered(self):  # type: ignore[no-untyped-def]
    out = enter_quiet(self)
    quiet.set()
    time.sleep(0.5)  # the redirection held long enough for the transport to start inside it
    return out


llama_utils.suppress_stdout_stderr.__enter__ = entered  # type: ignore[method-assign]
build = mcp_server.build_server


def build_then_wait(*args, **kwargs):  # type: ignore[no-untyped-def]
    server = build(*args, **kwargs)
    run = server.run

    def run_in_the_quiet(transport: str) -> None:
        if any(t.name == "assistant-load" for t in threading.enumerate()):
            quiet.wait(120)
        run(transport)

    server.run = run_in_the_quiet  # type: ignore[method-assign]
    return server


mcp_server.build_server = build_then_wait
sys.exit(main(["mcp"]))
