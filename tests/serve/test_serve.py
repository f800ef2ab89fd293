"""deepinfer serve against the official OpenAI and Anthropic Python SDKs, with
`deepinfer run` on the same bodies as the oracle of every greedy answer."""

import http.client
import json
import socket
import threading
import time

import anthropic
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import API_KEY, Server, normalize, normalize_sse, parse_sse, run_oracle

TOOL_CHAT = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TOOL_MESSAGES = {"name": "get_weather", "description": "The weather in a city",
                 "input_schema": TOOL_CHAT["function"]["parameters"]}
TOOL_RESPONSES = {"type": "function", "name": "get_weather",
                  "description": "The weather in a city",
                  "parameters": TOOL_CHAT["function"]["parameters"]}
QUESTION = "What is the weather in Paris?"
# anthropic 2.x's Messages methods take no temperature argument; the API still does
GREEDY = {"temperature": 0}

# The bodies the oracle answers: each protocol, plain and with a forced tool call.
BODIES = {
    "chat": ("chat", "/v1/chat/completions", {
        "model": "smollm2", "temperature": 0, "max_tokens": 12,
        "messages": [{"role": "user", "content": "Name three colours."}]}),
    "chat_tool": ("chat", "/v1/chat/completions", {
        "model": "smollm2", "temperature": 0, "max_tokens": 40,
        "messages": [{"role": "user", "content": QUESTION}], "tools": [TOOL_CHAT],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    "messages": ("messages", "/v1/messages", {
        "model": "smollm2", "temperature": 0, "max_tokens": 12,
        "messages": [{"role": "user", "content": "Name three colours."}]}),
    "messages_tool": ("messages", "/v1/messages", {
        "model": "smollm2", "temperature": 0, "max_tokens": 40,
        "messages": [{"role": "user", "content": QUESTION}], "tools": [TOOL_MESSAGES],
        "tool_choice": {"type": "tool", "name": "get_weather"}}),
    "responses": ("responses", "/v1/responses", {
        "model": "smollm2", "temperature": 0, "max_output_tokens": 12,
        "input": "Name three colours."}),
    "responses_tool": ("responses", "/v1/responses", {
        "model": "smollm2", "temperature": 0, "max_output_tokens": 40,
        "input": QUESTION, "tools": [TOOL_RESPONSES],
        "tool_choice": {"type": "function", "name": "get_weather"}}),
}


# ---- the oracle: the server answers exactly what `deepinfer run` answers -----

@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("name", sorted(BODIES))
def test_answer_identical_to_deepinfer_run(server, name, stream):
    protocol, path, body = BODIES[name]
    body = dict(body, stream=stream)
    expected = run_oracle(protocol, body)
    status, headers, got = server.request("POST", path, body)
    assert status == 200, got
    if stream:
        assert headers["Content-Type"] == "text/event-stream"
        assert normalize_sse(parse_sse(got.decode())) == normalize_sse(expected)
    else:
        assert headers["Content-Type"] == "application/json"
        assert normalize(json.loads(got)) == normalize(expected)


# ---- the SDKs -----------------------------------------------------------------

def test_models_listed_for_both_sdks(openai_client, anthropic_client):
    ids = [m.id for m in openai_client.models.list()]
    assert ids == ["SmolLM2-135M-Instruct.Q4_1"]  # the file's name, without .gguf
    assert [m.id for m in anthropic_client.models.list()] == ids


def test_chat_stream_joins_to_the_response(openai_client):
    kw = dict(model="smollm2", temperature=0, max_tokens=16,
              messages=[{"role": "user", "content": "Say hello to the world."}])
    full = openai_client.chat.completions.create(**kw)
    chunks = list(openai_client.chat.completions.create(stream=True, **kw))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content and text
    assert chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason
    # the answer names the model that answered, the one /v1/models lists
    assert full.model == chunks[0].model == openai_client.models.list().data[0].id
    assert full.usage.prompt_tokens > 0 and full.usage.completion_tokens > 0


def test_chat_n_choices_streamed_and_not(openai_client):
    """Chat n: indexed choices; each choice's deltas make its message and it
    finishes once; the last chunk has no choices and the usage of them all."""
    kw = dict(model="smollm2", temperature=0.9, seed=3, n=2, max_tokens=8,
              messages=[{"role": "user", "content": "Say hello to the world."}])
    full = openai_client.chat.completions.create(**kw)
    assert [c.index for c in full.choices] == [0, 1]
    chunks = list(openai_client.chat.completions.create(
        stream=True, stream_options={"include_usage": True}, **kw))
    for i in range(2):
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == i]
        assert "".join(d.delta.content or "" for d in mine) == full.choices[i].message.content
        assert [d.finish_reason for d in mine if d.finish_reason] == [full.choices[i].finish_reason]
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens


def test_chat_tool_call_round_trip(openai_client):
    messages = [{"role": "user", "content": QUESTION}]
    first = openai_client.chat.completions.create(
        model="smollm2", temperature=0, max_tokens=40, messages=messages, tools=[TOOL_CHAT],
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments), dict)
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}]
    second = openai_client.chat.completions.create(
        model="smollm2", temperature=0, max_tokens=24, messages=messages, tools=[TOOL_CHAT])
    assert second.choices[0].message.content
    assert second.usage.prompt_tokens > first.usage.prompt_tokens


def test_messages_stream_and_tool_round_trip(anthropic_client):
    with anthropic_client.messages.stream(
            model="smollm2", max_tokens=16, extra_body=GREEDY,
            messages=[{"role": "user", "content": "Say hello to the world."}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.content[0].text == text
    assert final.usage.output_tokens > 0

    messages = [{"role": "user", "content": QUESTION}]
    first = anthropic_client.messages.create(
        model="smollm2", max_tokens=40, extra_body=GREEDY, messages=messages,
        tools=[TOOL_MESSAGES], tool_choice={"type": "tool", "name": "get_weather"})
    assert first.stop_reason == "tool_use"
    use = [b for b in first.content if b.type == "tool_use"][0]
    assert use.name == "get_weather" and isinstance(use.input, dict)
    messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "Sunny, 21 C"}]}]
    second = anthropic_client.messages.create(model="smollm2", max_tokens=24, extra_body=GREEDY,
                                              messages=messages, tools=[TOOL_MESSAGES])
    # Anthropic's input_tokens leaves out what the prefix cache read: compare totals
    def total(u):
        return u.input_tokens + (u.cache_read_input_tokens or 0)
    assert second.content and total(second.usage) > total(first.usage)


def test_count_tokens_is_the_prompt_the_request_prefills(anthropic_client):
    kw = dict(model="smollm2", messages=[{"role": "user", "content": QUESTION}],
              tools=[TOOL_MESSAGES])
    counted = anthropic_client.messages.count_tokens(**kw)
    answered = anthropic_client.messages.create(max_tokens=4, extra_body=GREEDY, **kw)
    u = answered.usage  # Anthropic's input_tokens leaves out the cache's
    assert counted.input_tokens == u.input_tokens + u.cache_read_input_tokens > 0


def test_responses_stream_events_and_tool_round_trip(openai_client):
    events = list(openai_client.responses.create(
        model="smollm2", temperature=0, max_output_tokens=16, input="Say hello to the world.",
        stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.incomplete"  # max_output_tokens reached
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text and events[-1].response.output_text == text

    first = openai_client.responses.create(
        model="smollm2", temperature=0, max_output_tokens=40, input=QUESTION,
        tools=[TOOL_RESPONSES], tool_choice={"type": "function", "name": "get_weather"})
    calls = [o for o in first.output if o.type == "function_call"]
    assert calls and calls[0].name == "get_weather"
    json.loads(calls[0].arguments)
    second = openai_client.responses.create(
        model="smollm2", temperature=0, max_output_tokens=24, tools=[TOOL_RESPONSES],
        input=[{"role": "user", "content": QUESTION},
               {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
                "arguments": calls[0].arguments},
               {"type": "function_call_output", "call_id": calls[0].call_id,
                "output": "Sunny, 21 C"}])
    assert second.status == "completed" and second.output_text


# ---- errors: each API's shape, the status, the field named ---------------------

def test_openai_error_shape_names_the_field(openai_client):
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(
            model="smollm2", max_tokens=4, messages=[{"role": "wizard", "content": "hi"}])
    err = e.value.response.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    assert err["param"] == "messages[0].role" and "wizard" in err["message"]


def test_anthropic_error_shape(anthropic_client):
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_client.messages.create(model="smollm2", max_tokens=4, messages=[])
    body = e.value.response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["message"]


def test_malformed_json_is_400_in_each_shape(server):
    status, _, body = server.request("POST", "/v1/chat/completions", b'{"model": ')
    # where, in the library's words (as deepinfer run and the bindings say it)
    message = json.loads(body)["error"]["message"]
    assert status == 400 and message.startswith(
        "request: invalid JSON at line 1 column 11 (byte 10): "), message
    status, _, body = server.request("POST", "/v1/messages", b"[1, 2]")
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"
    status, _, body = server.request("POST", "/v1/responses", b"\xff\xfe")
    assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error"


def test_auth_bearer_and_x_api_key(server):
    import openai as oa
    bad = oa.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(oa.AuthenticationError) as e:
        bad.models.list()
    assert e.value.response.json()["error"]["type"] == "authentication_error"
    bad_a = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        bad_a.messages.create(model="smollm2", max_tokens=4,
                              messages=[{"role": "user", "content": "hi"}])
    assert e.value.response.json()["error"]["type"] == "authentication_error"
    for headers in ({}, {"Authorization": "Bearer " + API_KEY[:-1]},
                    {"Authorization": "Bearer " + API_KEY + "x"}, {"x-api-key": ""}):
        status, h, _ = server.request("GET", "/v1/models", headers=headers, auth=False)
        assert status == 401 and h.get("WWW-Authenticate") == "Bearer", headers
    status, _, _ = server.request("GET", "/v1/models", headers={"x-api-key": API_KEY},
                                  auth=False)
    assert status == 200
    status, _, body = server.request("GET", "/health", auth=False)
    assert status == 200 and json.loads(body) == {"status": "ok"}


def test_404_405_and_body_limit(server):
    status, _, body = server.request("GET", "/v1/nothing")
    assert status == 404 and json.loads(body)["error"]["type"] == "not_found_error"
    status, h, body = server.request("GET", "/v1/chat/completions")
    assert status == 405 and h["Allow"] == "POST"
    assert json.loads(body)["error"]["type"] == "invalid_request_error"
    big = {"model": "smollm2", "max_tokens": 4,
           "messages": [{"role": "user", "content": "x" * 70000}]}
    status, _, body = server.request("POST", "/v1/messages", big)
    assert status == 413 and json.loads(body)["error"]["type"] == "request_too_large"
    # the same without a Content-Length (chunked): read, dropped, refused
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.putrequest("POST", "/v1/chat/completions")
    conn.putheader("Authorization", "Bearer " + API_KEY)
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    for _ in range(20):
        piece = b"x" * 4096
        conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    conn.send(b"0\r\n\r\n")
    resp = conn.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["error"]["code"] == "request_too_large"
    conn.close()
    # the server still serves
    status, _, _ = server.request("GET", "/health")
    assert status == 200


def test_headers_over_the_limit_are_refused(server):
    status, _, _ = server.request("GET", "/v1/models", headers={"X-Big": "y" * 40000})
    assert status in (413, 431)
    assert server.request("GET", "/health")[0] == 200


def test_context_overflow_is_400_naming_the_limit(openai_client):
    with pytest.raises(openai.BadRequestError) as e:
        openai_client.chat.completions.create(
            model="smollm2", max_tokens=8,
            messages=[{"role": "user", "content": "word " * 5000}])
    assert "context" in e.value.response.json()["error"]["message"]


# ---- disconnects, metrics -----------------------------------------------------

def metric_values(text):
    values = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return values


def wait_idle(server, timeout=20):
    deadline = time.time() + timeout
    while True:
        v = metric_values(server.metrics())
        if v[("deepinfer_running_requests", ())] == 0 and v[("deepinfer_queue_length", ())] == 0:
            return v
        assert time.time() < deadline, "requests still running"
        time.sleep(0.05)


def test_client_disconnect_cancels_at_once(server):
    before = wait_idle(server)
    body = json.dumps({"model": "smollm2", "temperature": 0, "max_tokens": 2000, "stream": True,
                       "messages": [{"role": "user", "content": "Write a long story."}]})
    # streaming: read the first chunk, then leave
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
               "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (API_KEY, len(body), body)).encode())
    assert b"200 OK" in s.recv(4096)
    s.close()
    t0 = time.time()
    wait_idle(server, timeout=60)
    took = time.time() - t0
    # not streaming: leave while it is computed (once the engine has it)
    body2 = body.replace('"stream": true', '"stream": false')
    s = socket.create_connection(("127.0.0.1", server.port))
    s.sendall(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
               "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (API_KEY, len(body2), body2)).encode())
    deadline = time.time() + 20
    while metric_values(server.metrics())[("deepinfer_running_requests", ())] != 1:
        assert time.time() < deadline, "the request never reached the engine"
        time.sleep(0.02)
    s.close()
    t0 = time.time()
    after = wait_idle(server, timeout=60)
    took = max(took, time.time() - t0)
    # the cancel lands at the next step: under ASan (a Debug build) on a loaded
    # machine a prefill step took 8 s; 2000 tokens would take far longer
    assert took < 30.0
    key = ("deepinfer_client_disconnects_total", ())
    assert after[key] - before[key] == 2
    cancelled = ("deepinfer_generation_requests_total", (("result", "cancelled"),))
    assert after[cancelled] - before[cancelled] == 2


def test_metrics_count_requests_tokens_and_latencies(server, openai_client):
    before = metric_values(server.metrics())
    r = openai_client.chat.completions.create(
        model="smollm2", temperature=0, max_tokens=6,
        messages=[{"role": "user", "content": "Count to five."}])
    after = wait_idle(server)
    ok = ("deepinfer_requests_total", (("code", "200"), ("endpoint", "/v1/chat/completions")))
    assert after[ok] - before.get(ok, 0) == 1
    gen = ("deepinfer_generated_tokens_total", ())
    assert after[gen] - before[gen] >= r.usage.completion_tokens
    prompt = ("deepinfer_prompt_tokens_total", ())
    assert after[prompt] - before[prompt] == r.usage.prompt_tokens
    ttft = ("deepinfer_time_to_first_token_seconds_count", ())
    assert after[ttft] - before[ttft] == 1
    itl = ("deepinfer_inter_token_latency_seconds_count", ())
    assert after[itl] - before[itl] >= r.usage.completion_tokens - 1
    # the prefix cache: the same prompt again is a hit, counted
    cached = ("deepinfer_prompt_cached_tokens_total", ())
    r2 = openai_client.chat.completions.create(
        model="smollm2", temperature=0, max_tokens=6,
        messages=[{"role": "user", "content": "Count to five."}])
    again = wait_idle(server)
    assert r2.usage.prompt_tokens_details.cached_tokens > 0
    assert again[cached] - after[cached] == r2.usage.prompt_tokens_details.cached_tokens
    buckets = [v for (name, labels), v in sorted(again.items())
               if name == "deepinfer_time_to_first_token_seconds_bucket"]
    assert max(buckets) == again[ttft]


def test_metrics_report_the_kv_cache(server, openai_client):
    """The KV cache gauges (di_engine_kv_cache_stats) against block arithmetic: a
    request of n tokens holds ceil(n / 16) blocks while it runs, and when it ends
    the blocks of its n - 1 computed tokens that were not already cached stay in
    the prefix cache."""
    before = wait_idle(server)

    def g(v, name):
        return v[("deepinfer_kv_cache_" + name, ())]
    assert g(before, "block_tokens") == 16
    assert g(before, "used_blocks") == 0 and g(before, "used_tokens") == 0
    assert (g(before, "used_blocks") + g(before, "cached_blocks") + g(before, "free_blocks")
            == g(before, "blocks") > 0)
    # a prompt no earlier request had (past the chat template's shared start)
    nonce = "%d-%d" % (time.time_ns(), threading.get_ident())
    stream = openai_client.chat.completions.create(
        model="smollm2", temperature=0, max_tokens=120, stream=True,
        stream_options={"include_usage": True},
        messages=[{"role": "user", "content": f"Write a long story about case {nonce}."}])
    during, usage = None, None
    for chunk in stream:
        if during is None and chunk.choices and chunk.choices[0].delta.content:
            during = metric_values(server.metrics())
        if chunk.usage:
            usage = chunk.usage
    assert during is not None and usage is not None
    assert usage.completion_tokens == 120  # the budget, not an end of sequence
    n_prompt, hit = usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens
    if g(during, "used_blocks") > 0:  # (not when the engine had ended it already)
        tokens = g(during, "used_tokens")
        assert n_prompt <= tokens <= n_prompt + 119
        assert g(during, "used_blocks") == -(-tokens // 16)
        assert g(during, "usage_ratio") == pytest.approx(
            g(during, "used_blocks") / g(during, "blocks"))
    after = wait_idle(server)
    assert g(after, "used_blocks") == 0 and g(after, "used_tokens") == 0
    assert g(after, "usage_ratio") == 0

    def d(name):
        return after[(name, ())] - before[(name, ())]
    evicted = d("deepinfer_kv_cache_evicted_blocks_total")
    assert d("deepinfer_kv_cache_cached_blocks") == (n_prompt + 120 - 1) // 16 - hit // 16 - evicted
    assert d("deepinfer_prefix_cache_queries_tokens_total") == n_prompt
    assert d("deepinfer_prefix_cache_hits_tokens_total") == hit
    assert d("deepinfer_prompt_cached_tokens_total") == hit


# ---- limits and shutdown: servers of their own ----------------------------------

LONG = {"model": "smollm2", "temperature": 0, "max_tokens": 3000,
        "messages": [{"role": "user", "content": "Write a very long story."}]}


def test_full_queue_is_503_with_retry_after():
    s = Server("--max-queue", "1")
    try:
        results = {}
        t = threading.Thread(target=lambda: results.update(
            first=s.request("POST", "/v1/chat/completions", dict(LONG, max_tokens=200))))
        t.start()
        deadline = time.time() + 10
        while "deepinfer_running_requests 1" not in s.metrics():
            assert time.time() < deadline
            time.sleep(0.02)
        status, h, body = s.request("POST", "/v1/messages", {
            "model": "smollm2", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
        assert status == 503 and h["Retry-After"] == "1"
        assert json.loads(body)["error"]["type"] == "overloaded_error"
        t.join()
        assert results["first"][0] == 200
    finally:
        assert s.stop() == 0
        s.close()


def test_sigterm_finishes_in_flight_requests_and_exits_0():
    s = Server("--shutdown-timeout", "30")
    try:
        results = {}
        t = threading.Thread(target=lambda: results.update(
            r=s.request("POST", "/v1/chat/completions", dict(LONG, max_tokens=60))))
        t.start()
        deadline = time.time() + 10
        while "deepinfer_running_requests 1" not in s.metrics():
            assert time.time() < deadline
            time.sleep(0.02)
        s.proc.send_signal(15)
        t.join(timeout=60)
        status, _, body = results["r"]
        assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 60
        assert s.proc.wait(timeout=30) == 0
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", s.port), timeout=2).close()
        assert "no new connections" in s.log()
    finally:
        s.close()


def test_sigint_past_the_deadline_cancels_with_a_clean_stream_error():
    s = Server("--shutdown-timeout", "0")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        conn.request("POST", "/v1/messages", json.dumps(dict(LONG, stream=True)),
                     {"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        first = resp.readline()
        assert first.startswith(b"event: message_start")
        s.proc.send_signal(2)
        rest = (first + resp.read()).decode()
        events = parse_sse(rest)
        name, data = events[-1]
        assert name == "error" and json.loads(data)["error"]["type"] == "overloaded_error"
        assert "shutting down" in json.loads(data)["error"]["message"]
        assert s.proc.wait(timeout=30) == 0
    finally:
        s.close()


def test_slow_client_is_cut_off_at_the_request_timeout():
    s = Server("--request-timeout", "2")
    try:
        c = socket.create_connection(("127.0.0.1", s.port))
        c.settimeout(10)
        t0 = time.time()
        closed = False
        for ch in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            try:
                c.send(bytes([ch]))
                time.sleep(0.25)
            except OSError:
                closed = True
                break
            if time.time() - t0 > 6:
                break
        if not closed:
            try:
                closed = c.recv(100) == b""
            except OSError:
                closed = True
        assert closed and time.time() - t0 < 6
        c.close()
        assert s.request("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0
        s.close()


def test_draft_counts_in_metrics_and_changes_nothing(server):
    """`serve --draft prompt-lookup`: the drafted and kept tokens reach /metrics
    (summed from each request's DONE), and the answer equals the plain
    server's token for token (greedy, lossless)."""
    text = "\n".join(f"line {i}: the value of x{i} is {i * i}" for i in range(12))
    body = {"model": "smollm2", "temperature": 0, "max_tokens": 60,
            "messages": [{"role": "user", "content": f"Repeat exactly:\n{text}"}]}
    s = Server("--draft", "prompt-lookup", "--draft-max", "8")
    try:
        status, _, raw = s.request("POST", "/v1/chat/completions", body)
        assert status == 200
        v = wait_idle(s)
        drafted = v[("deepinfer_draft_tokens_total", ())]
        kept = v[("deepinfer_draft_accepted_tokens_total", ())]
        assert drafted > 0 and 0 < kept <= drafted
    finally:
        assert s.stop() == 0
        s.close()
    plain_status, _, plain = server.request("POST", "/v1/chat/completions", body)
    assert plain_status == 200
    assert (json.loads(raw)["choices"][0]["message"]["content"] ==
            json.loads(plain)["choices"][0]["message"]["content"])
    assert wait_idle(server)[("deepinfer_draft_tokens_total", ())] == 0
