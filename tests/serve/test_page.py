"""The chat page at / in a real headless browser (Chromium from Debian, driven over
the DevTools protocol with websocket-client): it loads, sends a message, and shows
the streamed answer — the same greedy answer `deepinfer run` gives to the body the
page sends. The screenshot is kept (DI_SERVE_ARTIFACTS, default the temp folder)
and its path printed."""

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import API_KEY, run_oracle

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="serve-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--remote-debugging-port=0",
             f"--user-data-dir={self.profile}", "--window-size=1000,800", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.time() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            assert self.proc.poll() is None and time.time() < deadline, "chromium did not start"
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = [t for t in targets if t["type"] == "page"][0]
        import websocket
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60,
                                              suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                assert "error" not in msg, msg
                return msg["result"]

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, r
        return r["result"].get("value")

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_chat_page_streams_the_answer_in_a_browser(server):
    b = Browser()
    try:
        b.call("Page.enable")
        b.call("Page.navigate", url=server.url + "/")
        deadline = time.time() + 30
        while b.eval("document.readyState") != "complete" or \
                b.eval("document.getElementById('form') !== null") is not True:
            assert time.time() < deadline, "the page did not load"
            time.sleep(0.1)
        assert b.eval("document.title") == "deepinfer chat"
        b.eval(f"document.getElementById('key').value = {json.dumps(API_KEY)};"
               "document.getElementById('temperature').value = '0';"
               "document.getElementById('max-tokens').value = '12';"
               "document.getElementById('prompt').value = 'Name three colours.';"
               "document.getElementById('form').requestSubmit(); true")
        deadline = time.time() + 60
        while b.eval("document.getElementById('status').textContent") != "done":
            assert b.eval("document.querySelector('.error') === null"), \
                b.eval("document.querySelector('.error').textContent")
            assert time.time() < deadline, "no answer"
            time.sleep(0.1)
        answer = b.eval("document.querySelector('.answer').textContent")
        user = b.eval("document.querySelector('.user').textContent")
        # a tool call, shown as it streams
        tools = {"tools": [{"type": "function", "function": {
            "name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
        b.eval(f"document.getElementById('extra').value = {json.dumps(json.dumps(tools))};"
               "document.getElementById('max-tokens').value = '40';"
               "document.getElementById('prompt').value = 'What is the weather in Paris?';"
               "document.getElementById('form').requestSubmit(); true")
        deadline = time.time() + 60
        while b.eval("document.querySelector('.tool') === null || "
                     "document.getElementById('status').textContent !== 'done'"):
            assert b.eval("document.querySelector('.error') === null"), \
                b.eval("document.querySelector('.error').textContent")
            assert time.time() < deadline, "no tool call shown"
            time.sleep(0.1)
        tool = b.eval("document.querySelector('.tool').textContent")
        # the screenshot shows both turns: the answer and the tool call
        shot = b.call("Page.captureScreenshot", format="png")["data"]
        out_dir = os.environ.get("DI_SERVE_ARTIFACTS", tempfile.gettempdir())
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, "serve-chat-page.png")
        with open(path, "wb") as f:
            f.write(base64.b64decode(shot))
        print(f"\nscreenshot of the chat page: {path}")
    finally:
        b.close()
    assert tool.startswith("tool call get_weather(") and tool.endswith(")"), tool
    assert isinstance(json.loads(tool[len("tool call get_weather("):-1]), dict), tool
    assert user == "Name three colours."
    expected = run_oracle("chat", {
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf", "stream": False, "max_tokens": 12,
        "temperature": 0, "messages": [{"role": "user", "content": "Name three colours."}]})
    assert answer == expected["choices"][0]["message"]["content"] and answer
    assert "POST /v1/chat/completions 200" in server.log()
