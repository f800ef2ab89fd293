"""Fixtures of the deepinfer serve tests: the real SmolLM2, a server started on a
free loopback port, and `deepinfer run` as the oracle of its answers.

Environment: DEEPINFER_CLI (the deepinfer command), DEEPINFER_RUN_CLI (the one whose
`run` is the oracle; default DEEPINFER_CLI), DI_ASSET_DIR (the folder of
scripts/fetch_assets.py). Without the model the tests are skipped."""

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

API_KEY = "test-key-0123456789"
CLI = os.environ.get("DEEPINFER_CLI", "build/release/examples/deepinfer")
# the oracle's `deepinfer run` (a sanitizer build of the server is checked against
# a release build's answers, which are the same and come faster)
RUN_CLI = os.environ.get("DEEPINFER_RUN_CLI", CLI)
ASSETS = os.environ.get("DI_ASSET_DIR", os.path.expanduser("~/.cache/deepinfer/assets"))
MODEL = os.path.join(ASSETS, "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
THREADS = os.environ.get("DI_SERVE_THREADS", "2")


class Server:
    """A `deepinfer serve` process; its stderr (the request log) is kept in a file."""

    def __init__(self, *args, api_key=API_KEY):
        if not os.path.exists(MODEL):
            pytest.skip(f"{MODEL} not fetched (scripts/fetch_assets.py)")
        self.log_file = tempfile.NamedTemporaryFile("w+", prefix="serve-", suffix=".log",
                                                    delete=False)
        cmd = [CLI, "serve", "--model", MODEL, "--port", "0", "--threads", THREADS, *args]
        if api_key:
            cmd += ["--api-key", api_key]
        self.api_key = api_key
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.log_file)
        deadline = time.time() + 60
        while True:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"the server did not start:\n{self.log()}")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def log(self):
        with open(self.log_file.name, encoding="utf-8") as f:
            return f.read()

    def request(self, method, path, body=None, headers=None, auth=True):
        """(status, headers, body bytes) of one request, with urllib (no SDK)."""
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"}
        if auth and self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def metrics(self):
        status, _, body = self.request("GET", "/metrics")
        assert status == 200
        return body.decode()

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.unlink(self.log_file.name)


@pytest.fixture(scope="session")
def server():
    s = Server("--max-body-bytes", "65536", "--parallel", "16")
    yield s
    rc = s.stop()
    log = s.log()
    s.close()
    assert rc == 0, f"the server exited {rc}:\n{log[-2000:]}"


@pytest.fixture(scope="session")
def openai_client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0,
                         timeout=120)


@pytest.fixture(scope="session")
def anthropic_client(server):
    import anthropic
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)


def run_oracle(protocol, body):
    """What `deepinfer run` answers to `body`: the response JSON, or the list of
    SSE messages when the body streams."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(body, f)
    try:
        out = subprocess.run([RUN_CLI, "run", "--model", MODEL, "--protocol", protocol, "--threads",
                              THREADS, f.name], capture_output=True, timeout=300)
    finally:
        os.unlink(f.name)
    assert out.returncode == 0, out.stderr.decode()
    text = out.stdout.decode()
    return parse_sse(text) if body.get("stream") else json.loads(text)


def parse_sse(text):
    """SSE text into [(event name or None, data string)], checking the framing."""
    assert text.endswith("\n\n"), text[-200:]
    messages = []
    for block in text[:-2].split("\n\n"):
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = line[len("data: "):]
            else:
                raise AssertionError(f"not an SSE line: {line!r}")
        assert data is not None, block
        messages.append((name, data))
    return messages


# Fields that differ between two answers of the same greedy request: random
# ids, clocks, and the prefix cache's counts (the server's cache is warm, a
# fresh `deepinfer run` is not; a hit changes no token).
VOLATILE = {"id", "call_id", "item_id", "created", "created_at", "completed_at", "cached_tokens",
            "prompt_cache_hit_tokens", "prompt_cache_miss_tokens", "cache_read_input_tokens",
            "cache_creation_input_tokens"}


def normalize(value):
    if isinstance(value, dict):
        value = dict(value)
        if isinstance(value.get("cache_read_input_tokens"), int) and "input_tokens" in value:
            # Anthropic's input_tokens leaves out the tokens read from the cache
            value["input_tokens"] += value["cache_read_input_tokens"]
        return {k: ("*" if k in VOLATILE else normalize(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def normalize_sse(messages):
    return [(name, data if data == "[DONE]" else normalize(json.loads(data)))
            for name, data in messages]
