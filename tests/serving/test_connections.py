"""What a client can hold of the server, bounded: a connection that sends no complete request is
closed after the idle bound; a drain at shutdown (SIGTERM) ends within its bound whatever is in
flight; `launch/serve.py` refuses a context that cannot hold a prompt and a reply token."""

import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.serving.servinglib import MODEL_NAME, LiveServer

ROOT = Path(__file__).resolve().parents[2]
HEADERS = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
           b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n")


def keyless_app(engine):
    from seetjax.serving.app import create_app
    from seetjax.serving.deps import ServerConfig
    return create_app(engine, ServerConfig(model_name=MODEL_NAME))


def connect(live, sent=b""):
    sock = socket.create_connection(("127.0.0.1", live.port), timeout=10)
    sock.sendall(sent)
    return sock


def seconds_until_closed(sock, start):
    """How long after `start` the server closed `sock` (reading whatever it answered first)."""
    with sock:
        while sock.recv(4096):
            pass
    return time.monotonic() - start


def test_connections_without_a_complete_request_are_closed_after_the_bound(engine):
    with LiveServer(keyless_app(engine), idle_timeout_s=0.5) as live:
        start = time.monotonic()
        held = [connect(live),  # connects, sends nothing
                connect(live, b"POST /v1/chat/compl"),  # half a request line
                connect(live, HEADERS[:-2]),  # headers never ended
                connect(live, HEADERS + b'{"model": ')]  # a body that stops
        for sock in held:
            assert seconds_until_closed(sock, start) < 5  # not renewed by trickled bytes
        # A keep-alive connection is closed once idle for the bound after its last response.
        sock = connect(live, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        answered = sock.recv(4096)
        assert answered.startswith(b"HTTP/1.1 200")
        assert seconds_until_closed(sock, time.monotonic()) < 5
        # A client that sends whole requests is served as before.
        sock = connect(live, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        with sock:
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")


def test_a_drain_at_shutdown_ends_within_its_bound(engine):
    live = LiveServer(keyless_app(engine), drain_timeout_s=1.0, idle_timeout_s=60.0)
    with live:
        stalled = connect(live, HEADERS + b'{"model": ')  # a request in flight, never ending
        time.sleep(0.2)
        start = time.monotonic()
        live.server.should_exit = True  # what uvicorn's SIGTERM handler sets
        live.thread.join(20)
        assert not live.thread.is_alive() and time.monotonic() - start < 5
        stalled.close()
    assert engine.running  # the app did not own the shared engine: it still serves


def test_launch_serve_refuses_a_context_too_small_for_a_prompt(model_dir):
    out = subprocess.run([sys.executable, "launch/serve.py", f"--model={model_dir}",
                          "--max_context=1", "--port=0"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "--max_context=1" in out.stderr
    assert "tokens" in out.stderr and "Traceback" not in out.stderr
