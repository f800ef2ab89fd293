#!/usr/bin/env bash
# deepinfer run and deepinfer chat on the real SmolLM2 (ChatML): the SSE stream
# and the non-streaming response of one greedy request agree (the streamed
# deltas joined are the response's content and tool calls), every SSE message is
# JSON, a named tool_choice ends in that call, and bad input gets one clear line
# and the documented exit status. Exits 77 (skipped) without the model.
set -uo pipefail
cli=$1
model=$2
python=${3:-python3}
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -r "$model" ] || { echo "skip: $model not fetched"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/req.json" <<'JSON'
{"model": "smollm2", "temperature": 0, "max_tokens": 48,
 "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
 "tools": [{"type": "function", "function": {"name": "get_weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}
JSON
"$cli" run --model "$model" --protocol chat --threads 2 "$tmp/req.json" > "$tmp/full.json" \
  2> "$tmp/err" || fail "run exited $?: $(cat "$tmp/err")"
"$cli" run --model "$model" --protocol chat --threads 2 --stream "$tmp/req.json" > "$tmp/sse" \
  2> "$tmp/err" || fail "run --stream exited $?: $(cat "$tmp/err")"
grep -q "loaded .* in .* s" "$tmp/err" || fail "no load line on stderr: $(cat "$tmp/err")"
"$python" - "$tmp/full.json" "$tmp/sse" <<'PY' || fail "stream and response disagree"
import json, sys
full = json.load(open(sys.argv[1]))
msg = full["choices"][0]["message"]
events = open(sys.argv[2]).read().split("\n\n")
assert events[-1] == "" and events[-2] == "data: [DONE]", events[-3:]
content, calls, finish = "", {}, None
for e in events[:-2]:
    assert e.startswith("data: "), e
    chunk = json.loads(e[len("data: "):])
    for ch in chunk["choices"]:
        d = ch["delta"]
        content += d.get("content") or ""
        for c in d.get("tool_calls") or []:
            slot = calls.setdefault(c["index"], {"name": "", "arguments": ""})
            slot["name"] += c.get("function", {}).get("name") or ""
            slot["arguments"] += c.get("function", {}).get("arguments") or ""
        finish = ch.get("finish_reason") or finish
assert content == (msg.get("content") or ""), (content, msg)
want = [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in msg.get("tool_calls") or []]
assert [calls[k] for k in sorted(calls)] == want, (calls, want)
assert finish == full["choices"][0]["finish_reason"], (finish, full)
PY

# a named function: the call is made, its arguments are JSON
"$python" -c "
import json,sys; r=json.load(open(sys.argv[1]))
r['tool_choice']={'type':'function','function':{'name':'get_weather'}}; r['max_tokens']=64
json.dump(r,open(sys.argv[2],'w'))" "$tmp/req.json" "$tmp/named.json"
"$cli" run --model "$model" --protocol chat --threads 2 - < "$tmp/named.json" > "$tmp/named.out" \
  2>/dev/null || fail "named tool_choice exited $?"
"$python" -c "
import json,sys; m=json.load(open(sys.argv[1]))['choices'][0]
c=m['message']['tool_calls'][0]['function']
assert c['name']=='get_weather' and isinstance(json.loads(c['arguments']), dict), m
assert m['finish_reason']=='tool_calls', m" "$tmp/named.out" || fail "no get_weather call: $(cat "$tmp/named.out")"

# Messages and Responses through ChatML: the same question, the protocol's own shapes
cat > "$tmp/msg.json" <<'JSON'
{"model": "smollm2", "max_tokens": 64, "temperature": 0,
 "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
 "tools": [{"name": "get_weather", "input_schema": {"type": "object",
   "properties": {"city": {"type": "string"}}}}],
 "tool_choice": {"type": "tool", "name": "get_weather"}}
JSON
"$cli" run --model "$model" --protocol messages --threads 2 "$tmp/msg.json" > "$tmp/msg.out" \
  2>/dev/null || fail "messages exited $?"
"$python" -c "
import json,sys; r=json.load(open(sys.argv[1]))
assert r['type']=='message' and r['stop_reason']=='tool_use', r
u=[b for b in r['content'] if b['type']=='tool_use'][0]
assert u['name']=='get_weather' and isinstance(u['input'], dict), r" "$tmp/msg.out" ||
  fail "messages: no tool_use: $(cat "$tmp/msg.out")"
cat > "$tmp/resp.json" <<'JSON'
{"model": "smollm2", "max_output_tokens": 24, "temperature": 0, "input": "Say hello."}
JSON
"$cli" run --model "$model" --protocol responses --stream --threads 2 "$tmp/resp.json" \
  > "$tmp/resp.sse" 2>/dev/null || fail "responses exited $?"
grep -q '^event: response.created$' "$tmp/resp.sse" || fail "responses: no response.created"
grep -Eq '^event: response.(completed|incomplete)$' "$tmp/resp.sse" || fail "responses: no end event"

# errors: one line, exit 1 for a failed run, 2 for usage
expect() { # STATUS NEEDLE ARGS...
  local want=$1 needle=$2; shift 2
  err=$("$cli" "$@" 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq "$want" ] || fail "deepinfer $* exited $rc, want $want ($err)"
  [[ "$err" == *"$needle"* ]] || fail "deepinfer $*: '$err' does not say '$needle'"
}
printf '{"messages": [' > "$tmp/bad.json"
# bad JSON: where it is, in the library's words (render's message, the bindings')
expect 1 "request: invalid JSON at line 1 column 15 (byte 14): " run --model "$model" \
  --protocol chat "$tmp/bad.json"
same=$("$cli" render --protocol chat --encoding chatml "$tmp/bad.json" 2>&1 >/dev/null)
[ "${err#deepinfer run: }" = "${same#deepinfer render: }" ] || fail "run says '$err', render '$same'"
expect 1 "tools[0]" run --model "$model" --protocol messages "$tmp/req.json"
expect 1 "$tmp/none.gguf" run --model "$tmp/none.gguf" --protocol chat "$tmp/req.json"
expect 2 "--model is required" run --protocol chat "$tmp/req.json"
expect 2 "--protocol is required" run --model "$model" "$tmp/req.json"
expect 2 "--protocol must be" run --model "$model" --protocol soap "$tmp/req.json"
expect 2 "unexpected argument" run --model "$model" --protocol chat --bogus "$tmp/req.json"
expect 2 "--temperature" chat --model "$model" --temperature hot

# a closed stdout is a failed run (not a SIGPIPE death); Ctrl-C exits 130
"$cli" run --model "$model" --protocol chat --stream --max-tokens 64 "$tmp/req.json" \
  2>"$tmp/err" | head -c 10 >/dev/null
rc=${PIPESTATUS[0]}
[ "$rc" -eq 1 ] || fail "run into a closed pipe exited $rc, want 1"
grep -q "cannot write the output" "$tmp/err" || fail "closed pipe: $(cat "$tmp/err")"
# (0.02 s lands during the load, which once forgot it and answered anyway)
timeout --preserve-status -s INT 0.02 "$cli" run --model "$model" --protocol chat \
  --max-tokens 3000 "$tmp/req.json" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 130 ] || fail "Ctrl-C exited $rc, want 130: $(cat "$tmp/err")"
# chat: a line that is not UTF-8 is refused, said, and the status says so
printf 'hi\n\xff\xfe\n' | "$cli" chat --model "$model" --max-tokens 4 >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "chat with a non-UTF-8 line exited $rc, want 1"
grep -q "not valid UTF-8" "$tmp/err" || fail "chat did not say why: $(cat "$tmp/err")"

# chat: two turns from stdin, then /reset and /quit
out=$(printf 'Hello!\nAnd again?\n/reset\nHi\n/quit\nnot read\n' |
      "$cli" chat --model "$model" --temperature 0 --max-tokens 8 --threads 2 2>"$tmp/err") ||
  fail "chat exited $?: $(cat "$tmp/err")"
[ "$(printf '%s\n' "$out" | grep -c .)" -ge 3 ] || fail "chat printed too little: $out"
# chat: the second turn takes the first turn's blocks from the prefix cache
printf 'Tell me about the sea in two sentences.\nAnd about the mountains?\n/quit\n' |
  "$cli" chat --model "$model" --temperature 0 --max-tokens 24 --threads 2 --verbose \
  >/dev/null 2>"$tmp/err" || fail "chat --verbose exited $?: $(cat "$tmp/err")"
[ "$(grep -c 'from the prefix cache' "$tmp/err")" -eq 2 ] || fail "chat --verbose: $(cat "$tmp/err")"
grep 'from the prefix cache' "$tmp/err" | tail -n 1 | grep -Eq '\(([1-9][0-9]*) from' ||
  fail "chat's second turn took nothing from the prefix cache: $(cat "$tmp/err")"

# --cache-dir: the second run finds the first one's prompt blocks on disk, and
# answers the same; a directory it cannot use is a warning, not a failure
"$cli" run --model "$model" --protocol chat --threads 2 --cache-dir "$tmp/kv" "$tmp/req.json" \
  > "$tmp/c1.json" 2> "$tmp/err" || fail "run --cache-dir exited $?: $(cat "$tmp/err")"
"$cli" run --model "$model" --protocol chat --threads 2 --cache-dir "$tmp/kv" --verbose \
  "$tmp/req.json" > "$tmp/c2.json" 2> "$tmp/err" || fail "run --cache-dir exited $?"
grep -Eq "prompt tokens \([1-9][0-9]* from the prefix cache\)" "$tmp/err" ||
  fail "no hit from the disk tier: $(cat "$tmp/err")"
"$python" - "$tmp/full.json" "$tmp/c1.json" "$tmp/c2.json" <<'PY' || fail "cached answers differ"
import json, sys
a, b, c = (json.load(open(p)) for p in sys.argv[1:])
assert a["choices"] == b["choices"] == c["choices"], (a, c)
u = c["usage"]
assert u["prompt_cache_hit_tokens"] > 0 and u["prompt_cache_hit_tokens"] % 16 == 0, u
assert u["prompt_tokens_details"]["cached_tokens"] == u["prompt_cache_hit_tokens"], u
assert b["usage"]["prompt_cache_hit_tokens"] == 0, b["usage"]
PY
# speculative decoding (--draft, --draft-max, --draft-model): the same greedy
# answer, and --verbose counts the drafts verified and kept
for flags in "--draft prompt-lookup --draft-max 4" "--draft draft-model --draft-model $model --draft-max 3"; do
  # shellcheck disable=SC2086
  "$cli" run --model "$model" --protocol chat --threads 2 $flags --verbose "$tmp/req.json" \
    > "$tmp/s.json" 2> "$tmp/err" || fail "run $flags exited $?: $(cat "$tmp/err")"
  grep -Eq "speculative decoding: [0-9]+ draft tokens verified, [0-9]+ kept" "$tmp/err" ||
    fail "run $flags --verbose did not count the drafts: $(cat "$tmp/err")"
  "$python" - "$tmp/full.json" "$tmp/s.json" <<'PY' || fail "run $flags answered differently"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert a["choices"] == b["choices"], (a["choices"], b["choices"])
PY
done
: > "$tmp/file"
"$cli" run --model "$model" --protocol chat --threads 2 --cache-dir "$tmp/file/kv" \
  "$tmp/req.json" > "$tmp/c3.json" 2> "$tmp/err" || fail "unusable --cache-dir exited $?"
grep -q "no disk tier" "$tmp/err" || fail "unusable --cache-dir not said: $(cat "$tmp/err")"

# --max-tokens overrides the body's max_tokens (48 above); the body's wins over
# nothing else: the usage counts what was generated
"$cli" run --model "$model" --protocol chat --threads 2 --max-tokens 3 "$tmp/req.json" \
  > "$tmp/m3.json" 2> "$tmp/err" || fail "run --max-tokens exited $?: $(cat "$tmp/err")"
"$python" - "$tmp/m3.json" <<'PY' || fail "--max-tokens 3 did not hold: $(cat "$tmp/m3.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["usage"]["completion_tokens"] == 3 and r["choices"][0]["finish_reason"] == "length", r
assert r["model"] == "SmolLM2-135M-Instruct.Q4_1", r["model"]
PY
# a field the engine cannot honour: one line naming it, exit 1
echo '{"n": 0, "messages": [{"role": "user", "content": "hi"}]}' |
  "$cli" run --model "$model" --protocol chat - > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 1 ] && grep -q "n: 0 choices" "$tmp/err" || fail "n=0 exited $rc: $(cat "$tmp/err")"
# Chat n: two indexed choices, the usage summing them
echo '{"n": 2, "max_tokens": 3, "seed": 1, "messages": [{"role": "user", "content": "hi"}]}' |
  "$cli" run --model "$model" --protocol chat --threads 2 - > "$tmp/n2.json" 2> "$tmp/err" ||
  fail "n=2 exited $?: $(cat "$tmp/err")"
"$python" - "$tmp/n2.json" <<'PY' || fail "n=2: $(cat "$tmp/n2.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert [c["index"] for c in r["choices"]] == [0, 1], r
assert r["usage"]["completion_tokens"] == 6, r["usage"]
PY

# info: the model as JSON; a missing model is one line and exit 1, no --model exit 2
"$cli" info --model "$model" > "$tmp/info.json" 2> "$tmp/err" || fail "info exited $?: $(cat "$tmp/err")"
"$python" - "$tmp/info.json" <<'PY' || fail "info: $(cat "$tmp/info.json")"
import json, sys
i = json.load(open(sys.argv[1]))
assert i["family"] == "llama" and i["encoding"] == "chatml" and i["parameters"] == 134515008, i
assert "<|im_end|>" in [t["text"] for t in i["special_tokens"]["eos"]], i["special_tokens"]
PY
"$cli" info --model "$tmp/nope.gguf" > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "info on a missing file exited $rc"
"$cli" info > /dev/null 2>&1; rc=$?
[ "$rc" -eq 2 ] || fail "info without --model exited $rc, want 2"
# generate with a constraint (docs/cli.md): the decoded output matches the
# regex whole, a schema's output is a JSON object with the required key, and
# the errors name the problem (a compile error exits 1 with the library's
# message; two constraints are a usage error, exit 2).
prompt=$(printf 'The year is' | "$cli" tokenize --tokenizer "$model" -) || fail "tokenize exited $?"
prompt=$(printf '%s' "$prompt" | tr -d '[] \n')
"$cli" generate --model "$model" --tokens "$prompt" --max-tokens 16 --threads 2 \
  --regex '[0-9]{4}' > "$tmp/ids" 2> "$tmp/err" || fail "generate --regex exited $?: $(cat "$tmp/err")"
text=$("$cli" tokenize --tokenizer "$model" --decode "$tmp/ids") || fail "decode exited $?"
text=${text%<|im_end|>}; text=${text%<|endoftext|>} # the end token, allowed once complete
[[ "$text" =~ ^[0-9]{4}$ ]] || fail "generate --regex '[0-9]{4}' wrote '$text'"
# --verbose counts the tokens generated (the output ends when complete, before
# --max-tokens); the engine's run has no KV cache line and, without a drafter,
# no draft counts
"$cli" generate --model "$model" --tokens "$prompt" --max-tokens 16 --threads 2 \
  --regex '[0-9]{4}' --verbose > "$tmp/ids" 2> "$tmp/err" || fail "generate --verbose exited $?"
n_ids=$(tr -cd ',' < "$tmp/ids" | wc -c) # commas: the IDs less one
grep -q "decode $n_ids tokens .* tokens/s" "$tmp/err" ||
  fail "generate --regex --verbose did not count $n_ids decoded tokens: $(cat "$tmp/err")"
! grep -q "KV cache\|speculative" "$tmp/err" || fail "generate --regex --verbose: $(cat "$tmp/err")"
printf '%s' '{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}' \
  > "$tmp/schema.json"
"$cli" generate --model "$model" --tokens "$prompt" --max-tokens 48 --threads 2 \
  --json-schema "$tmp/schema.json" > "$tmp/ids" 2> "$tmp/err" ||
  fail "generate --json-schema exited $?: $(cat "$tmp/err")"
text=$("$cli" tokenize --tokenizer "$model" --decode "$tmp/ids" | tr -d ' \n\t') || fail "decode exited $?"
text=${text%<|im_end|>}; text=${text%<|endoftext|>}
[[ "$text" =~ ^\{\"n\":-?[0-9]+\}$ ]] || fail "generate --json-schema wrote '$text'"
"$cli" generate --model "$model" --tokens "$prompt" --max-tokens 4 --regex '[0-9' > /dev/null \
  2> "$tmp/err"; rc=$?
[ "$rc" -eq 1 ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "a bad regex exited $rc: $(cat "$tmp/err")"
grep -q "regex" "$tmp/err" || fail "the regex error does not name the regex: $(cat "$tmp/err")"
"$cli" generate --model "$model" --tokens "$prompt" --max-tokens 4 --regex a --grammar "$tmp/g" \
  > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "--regex with --grammar exited $rc, want 2"
grep -q "mutually exclusive" "$tmp/err" || fail "two constraints: $(cat "$tmp/err")"
"$cli" generate --model "$model" --tokens "$prompt" --max-tokens 4 --grammar "$tmp/none.gbnf" \
  > /dev/null 2> "$tmp/err"; rc=$?
[ "$rc" -eq 1 ] && grep -q "none.gbnf" "$tmp/err" || fail "a missing grammar file exited $rc"
echo "ok: run (generate with a constraint, JSON and SSE agree, named tool call, --cache-dir, --draft, --max-tokens, refused fields), chat, info, and their errors"
