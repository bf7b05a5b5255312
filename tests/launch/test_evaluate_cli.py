"""`launch/evaluate.py` on the embedded default: a report per split in markdown and JSON."""

import http.server
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.launch.flagcheck import assert_flag_errors

ROOT = Path(__file__).resolve().parents[2]


def test_evaluate_script_writes_reports(embedded_dir, tmp_path):
    stem = tmp_path / "not" / "made" / "yet" / "eval"  # directories are made before evaluating
    out = subprocess.run(
        [sys.executable, "launch/evaluate.py", f"--out={stem}", "--per_category=1",
         "--splits=test", "--max_reply_tokens=8", "--max_episode_tokens=1024"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(stem.with_suffix(".json").read_text())
    assert report[0]["split"] == "test" and len(report[0]["entries"]) == 4
    assert set(report[0]["accuracy"]) == {"base", "miss_func", "miss_param", "long_context"}
    assert "| test |" in stem.with_suffix(".md").read_text()


BAD_FLAGS = [
    (["--splits=train,bogus"], "--splits"), (["--categories=base,nope"], "--categories"),
    (["--per_category=-1"], "--per_category"), (["--max_reply_tokens=0"], "--max_reply_tokens"),
    (["--max_episode_tokens=100", "--max_reply_tokens=256"], "--max_episode_tokens"),
    (["--compact_description_chars=-1"], "--compact_description_chars"),
    (["--run=x", "--model=y"], "--run or --model"), (["--temperature=-1"], "--temperature"),
    (["--temperature=inf"], "--temperature must be a finite number"),
    (["--temperature=nan"], "--temperature must be a finite number"),
    (["--decoding=lenient,strict"], "--decoding")]


def test_bad_flags_fail_before_anything_loads():
    assert_flag_errors("launch/evaluate.py", BAD_FLAGS + [(["--per_category=3"], "")])
    out = subprocess.run([sys.executable, "launch/evaluate.py", "--per_category=-1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)  # the real command line
    assert out.returncode != 0 and "--per_category" in out.stderr, out.stderr[-1000:]
    assert "Traceback" not in out.stderr


class _WrongKey(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that refuses every request's API key, as OpenAI does."""

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.dumps({"error": {"message": "Incorrect API key provided",
                                     "type": "invalid_request_error",
                                     "code": "invalid_api_key"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _evaluate_endpoint(url, out):
    return subprocess.run(
        [sys.executable, "launch/evaluate.py", f"--endpoint={url}", "--model=m", f"--out={out}",
         "--splits=test", "--categories=base", "--per_category=1", "--max_retries=0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_an_endpoint_that_cannot_be_reached_or_refuses_the_key_fails_the_run(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        unreachable = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    out = _evaluate_endpoint(unreachable, tmp_path / "unreachable")
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"--endpoint={unreachable}" in out.stderr and "cannot connect" in out.stderr
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WrongKey)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = _evaluate_endpoint(f"http://127.0.0.1:{server.server_port}/v1", tmp_path / "key")
    finally:
        server.shutdown()
    assert out.returncode == 1, out.stderr[-2000:]
    assert "HTTP 401" in out.stderr and "Incorrect API key provided" in out.stderr
    assert "--api_key_env=OPENAI_API_KEY" in out.stderr
    assert "Traceback" not in out.stderr
    assert not list(tmp_path.glob("*.md"))  # no 0% report
