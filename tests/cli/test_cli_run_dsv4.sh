#!/usr/bin/env bash
# deepinfer run on a DeepSeek-V4-shaped model (random weights, the real V4
# tokenizer beside its config.json): the load line names the V4 encoding, and a
# Chat Completions, a Messages and a Responses request each answer through it,
# streamed and not. Each SSE message is JSON of its protocol's kind, the stream
# ends exactly once (one [DONE], one message_stop, one terminal response event),
# and the streamed deltas joined are the full response's text and reasoning
# (greedy, or seeded while thinking). The words are noise; the path is real.
# A model name the recipe does not know exits 1 naming it; without a tokenizer
# a protocol request exits 1 saying so, and --tokenizer supplies one.
# Usage: test_cli_run_dsv4.sh CLI WRITE_VOCAB_MODEL TOKENIZER [PYTHON]
# Exits 77 (skipped) without the tokenizer.
set -uo pipefail
cli=$1
writer=$2
tok=$3
python=${4:-python3}
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -r "$tok" ] || { echo "skip: $tok not fetched"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$writer" dsv4 "$tmp/model" || fail "write_vocab_model exited $?"

# no tokenizer yet: a protocol request is refused, saying so; --tokenizer names one
printf '%s' '{"model":"DeepSeek-V4-Pro","max_tokens":3,"messages":[{"role":"user","content":"Hi"}]}' \
  > "$tmp/hi.req"
err=$("$cli" run --model "$tmp/model" --protocol chat --threads 2 "$tmp/hi.req" 2>&1 >/dev/null)
rc=$?
[ $rc -eq 1 ] || fail "no tokenizer: exit $rc, want 1"
echo "$err" | grep -q "this model has no tokenizer" || fail "no tokenizer not said: $err"
"$cli" run --model "$tmp/model" --tokenizer "$tok" --protocol chat --threads 2 "$tmp/hi.req" \
  > "$tmp/hi.json" 2> "$tmp/hi.err" || fail "--tokenizer: exit $?: $(cat "$tmp/hi.err")"
grep -q "loaded .*encoding dsv4" "$tmp/hi.err" || fail "--tokenizer load line: $(cat "$tmp/hi.err")"
grep -q '"reasoning_content"' "$tmp/hi.json" || fail "--tokenizer: $(cat "$tmp/hi.json")"
err=$("$cli" run --model "$tmp/model" --tokenizer "$tmp/none.json" --protocol chat "$tmp/hi.req" \
      2>&1 >/dev/null)
rc=$?
[ $rc -eq 1 ] && echo "$err" | grep -q "none.json" || fail "missing --tokenizer file: $rc $err"

cp "$tok" "$tmp/model/tokenizer.json"

# run PROTOCOL NAME BODY: NAME.json (the response) and NAME.sse (the stream)
run() {
  printf '%s' "$3" > "$tmp/$2.req"
  "$cli" run --model "$tmp/model" --protocol "$1" --threads 2 "$tmp/$2.req" > "$tmp/$2.json" \
    2> "$tmp/$2.err" || fail "$2: run exited $?: $(cat "$tmp/$2.err")"
  "$cli" run --model "$tmp/model" --protocol "$1" --threads 2 --stream "$tmp/$2.req" \
    > "$tmp/$2.sse" 2> "$tmp/$2.err" || fail "$2: run --stream exited $?: $(cat "$tmp/$2.err")"
}

run chat chat '{"model":"DeepSeek-V4-Pro","temperature":0,"max_tokens":10,
  "thinking":{"type":"disabled"},"messages":[{"role":"user","content":"Hello!"}]}'
grep -q "loaded .*encoding dsv4" "$tmp/chat.err" || fail "load line: $(cat "$tmp/chat.err")"
run chat think '{"model":"DeepSeek-V4-Pro","seed":7,"max_tokens":12,
  "messages":[{"role":"user","content":"Why is the sky blue?"}]}'
run messages messages '{"model":"DeepSeek-V4-Pro","temperature":0,"max_tokens":7,
  "thinking":{"type":"disabled"},"system":"You are terse.",
  "messages":[{"role":"user","content":"Name three primes."}]}'
run responses responses '{"model":"DeepSeek-V4-Pro","temperature":0,"max_output_tokens":12,
  "reasoning":{"effort":"none"},"input":"你好"}'

"$python" - "$tmp" <<'PY' || fail "a response and its stream disagree"
import json, sys
d = sys.argv[1]
def load(name):
    return json.load(open(f"{d}/{name}.json")), open(f"{d}/{name}.sse").read()

def chat(name):
    full, sse = load(name)
    assert full["object"] == "chat.completion", full
    msg = full["choices"][0]["message"]
    events = sse.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]", events[-3:]
    assert sse.count("data: [DONE]") == 1
    text = {"content": "", "reasoning_content": ""}
    finish = None
    for e in events[:-2]:
        assert e.startswith("data: "), e
        chunk = json.loads(e[len("data: "):])
        assert chunk["object"] == "chat.completion.chunk", chunk
        for ch in chunk["choices"]:
            for k in text:
                text[k] += ch["delta"].get(k) or ""
            finish = ch.get("finish_reason") or finish
    for k in text:
        assert text[k] == (msg.get(k) or ""), (name, k, text[k], msg)
    assert finish == full["choices"][0]["finish_reason"] == "length", (finish, full)
    return msg

def sse_events(sse):
    out = []
    for e in sse.split("\n\n")[:-1]:
        head, data = e.split("\n", 1)
        assert head.startswith("event: ") and data.startswith("data: "), e
        body = json.loads(data[len("data: "):])
        assert body["type"] == head[len("event: "):], e
        out.append(body)
    return out

msg = chat("chat")
assert msg["content"], msg
think = chat("think")
assert think.get("reasoning_content"), think  # thinking is on by default for V4

full, sse = load("messages")
assert full["type"] == "message" and full["stop_reason"] == "max_tokens", full
ev = sse_events(sse)
kinds = [e["type"] for e in ev]
assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
assert kinds.count("message_stop") == 1, kinds
streamed = "".join(e["delta"].get("text", "") for e in ev if e["type"] == "content_block_delta")
text = "".join(b.get("text", "") for b in full["content"] if b["type"] == "text")
assert streamed == text and text, (streamed, full)

full, sse = load("responses")
assert full["object"] == "response" and full["status"] == "incomplete", full
ev = sse_events(sse)
kinds = [e["type"] for e in ev]
assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete", kinds
terminal = [k for k in kinds if k in ("response.completed", "response.incomplete", "response.failed")]
assert len(terminal) == 1, kinds
streamed = "".join(e["delta"] for e in ev if e["type"] == "response.output_text.delta")
text = "".join(c["text"] for o in full["output"] if o["type"] == "message"
               for c in o["content"] if c["type"] == "output_text")
assert streamed == text and text, (streamed, full)
PY

# a model name deepseek-recipe does not know: one line naming it, exit 1
printf '%s' '{"model":"gpt-4o","messages":[{"role":"user","content":"Hi"}]}' > "$tmp/bad.req"
err=$("$cli" run --model "$tmp/model" --protocol chat --threads 2 "$tmp/bad.req" 2>&1 >/dev/null)
rc=$?
[ $rc -eq 1 ] || fail "unknown model name: exit $rc, want 1"
echo "$err" | grep -q "gpt-4o" || fail "unknown model name not named: $err"
echo "ok: deepinfer run answers chat, messages and responses through the V4 encoding"
