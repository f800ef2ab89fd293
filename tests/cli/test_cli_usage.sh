#!/usr/bin/env bash
# The deepinfer command's contract for usage errors: exit status 2 and exactly one
# line on stderr naming the problem; `version` prints the library version.
set -uo pipefail
cli=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
tmpe=$(mktemp); trap 'rm -f "$tmpe"' EXIT

out=$("$cli" version) || fail "version exited $?"
[[ "$out" == deepinfer\ [0-9]*.[0-9]*.[0-9]*\ \(header\ [0-9]*.[0-9]*.[0-9]*\) ]] || fail "version printed '$out'"

err=$("$cli" no-such-command 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "unknown command exited $rc, want 2"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "unknown command printed more than one line: $err"
[[ "$err" == *"no-such-command"* ]] || fail "message does not name the command: $err"

err=$("$cli" version extra 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "extra argument exited $rc, want 2"
[[ "$err" == *"extra"* ]] || fail "message does not name the argument: $err"

err=$("$cli" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "no command exited $rc, want 2"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "no command printed more than one line: $err"

"$cli" help extra >/dev/null 2>&1; rc=$?
[ "$rc" -eq 2 ] || fail "help with an argument exited $rc, want 2"

if [ -w /dev/full ]; then
  "$cli" version >/dev/full 2>/dev/null; rc=$?
  [ "$rc" -eq 1 ] || fail "version into a full device exited $rc, want 1"
fi

"$cli" help | grep -q '^  version ' || fail "help does not list version"
# every command answers --help and -h with its usage on stdout, exit 0, nothing on stderr
cmds=$("$cli" help | sed -n 's/^  \([a-z]*\) .*/\1/p')
[ "$(printf '%s\n' "$cmds" | wc -l)" -ge 11 ] || fail "help lists too few commands: $cmds"
for c in $cmds; do
  for h in --help -h; do
    out=$("$cli" "$c" "$h" 2>"$tmpe"); rc=$?
    [ "$rc" -eq 0 ] || fail "$c $h exited $rc, want 0: $(cat "$tmpe")"
    [ ! -s "$tmpe" ] || fail "$c $h wrote to stderr: $(cat "$tmpe")"
    [[ "$out" == usage:\ deepinfer* ]] || fail "$c $h printed '$out'"
    [ "$c" = help ] || [[ "$out" == *"deepinfer $c"* ]] || fail "$c $h: usage does not name $c: $out"
  done
  # help COMMAND prints the same usage
  [ "$c" = help ] || [ "$("$cli" help "$c" 2>&1)" = "$("$cli" "$c" --help 2>&1)" ] ||
    fail "help $c differs from $c --help"
done
err=$("$cli" render --protocol chat --encoding dsv9 - 2>&1 </dev/null >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "render with a bad encoding exited $rc, want 2"
[[ "$err" == *"dsv9"* ]] || fail "message does not name the encoding: $err"
out=$(printf '%s' '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"Hi"}],"reasoning_effort":"none"}' |
      "$cli" render --protocol chat --encoding dsv4 -) || fail "render exited $?"
[ "$out" = "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>" ] || fail "render printed '$out'"
err=$(printf '%s' '{"model":"DeepSeek-V4-Pro","messages":[{"role":"wizard","content":"Hi"}]}' |
      "$cli" render --protocol chat --encoding dsv4 - 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "render of an invalid request exited $rc, want 1"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "invalid request printed more than one line: $err"
[[ "$err" == *"messages[0].role"* ]] || fail "message does not name the field: $err"

# parse: usage errors, a bad chunks file, and a stream that ends with [DONE]
tmp=$(mktemp -d); trap 'rm -rf "$tmp" "$tmpe"' EXIT
printf '%s' '{"model":"DeepSeek-V4-Pro","messages":[{"role":"user","content":"hi"}],"stream":true,"stop":["END"]}' >"$tmp/req.json"
printf '%s' '{"chunks":["Hmm","</think>Hel","lo END tail"],"finish_reason":"length","prompt_tokens":5}' >"$tmp/chunks.json"
err=$("$cli" parse --request "$tmp/req.json" "$tmp/chunks.json" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "parse without --protocol exited $rc, want 2"
[[ "$err" == *"--protocol"* ]] || fail "parse usage message does not name --protocol: $err"
printf '%s' '{"chunks":[1]}' >"$tmp/bad.json"
err=$("$cli" parse --protocol chat --request "$tmp/req.json" "$tmp/bad.json" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "parse of a bad chunks file exited $rc, want 1"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "bad chunks printed more than one line: $err"
out=$("$cli" parse --protocol chat --request "$tmp/req.json" --stream --id x --created 7 "$tmp/chunks.json") ||
  fail "parse --stream exited $?"
[[ "$out" == *'"content":"lo "'* ]] || fail "parse --stream lost the answer before the stop: $out"
[[ "$out" == *'"finish_reason":"stop"'* ]] || fail "parse --stream: the stop sequence did not end it: $out"
[[ "$(printf '%s' "$out" | tail -n 1)" == "data: [DONE]" ]] || fail "parse --stream does not end with [DONE]"
out=$("$cli" parse --protocol messages --request <(printf '%s' '{"model":"DeepSeek-V4-Pro","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}') "$tmp/chunks.json") ||
  fail "parse (messages) exited $?"
[[ "$out" == *'"stop_reason":"max_tokens"'* ]] || fail "parse (messages) response: $out"
# speculative decoding's options: a bad value or combination is a usage error
# (exit 2, one line naming it) for generate and run, before any model loads
expect_usage() { # WANT-IN-MESSAGE ARGS...
  local want=$1; shift
  err=$("$cli" "$@" 2>&1 >/dev/null </dev/null); rc=$?
  [ "$rc" -eq 2 ] || fail "$* exited $rc, want 2"
  [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "$* printed more than one line: $err"
  [[ "$err" == *"$want"* ]] || fail "$*: the message does not say '$want': $err"
}
gen=(generate --model /nonexistent --tokens 1,2 --max-tokens 2)
run=(run --model /nonexistent --protocol chat -)
for cmd in gen run; do
  declare -n base=$cmd
  expect_usage "--draft must be off, auto, prompt-lookup, draft-model or mtp" "${base[@]}" --draft bogus
  expect_usage "--draft-max must be 0 (off) to 64" "${base[@]}" --draft-max 65
  expect_usage "--draft-max must be 0 (off) to 64" "${base[@]}" --draft-max -1
  expect_usage "--speculative must be 0 (off) to 64" "${base[@]}" --speculative x
  expect_usage "--draft draft-model needs --draft-model PATH" "${base[@]}" --draft draft-model
  expect_usage "not prompt-lookup" "${base[@]}" --draft prompt-lookup --draft-model /m.gguf
  expect_usage "--draft-max cannot be used with --draft off" "${base[@]}" --draft off --draft-max 3
  expect_usage "--draft-model cannot be used with --draft off" "${base[@]}" --draft off --draft-model /m
  expect_usage "--draft-model cannot be used with --draft-max 0" "${base[@]}" --draft-max 0 --draft-model /m
  expect_usage "--draft-model needs a model file" "${base[@]}" --draft-model ""
  expect_usage "--device must be cpu or cuda" "${base[@]}" --device gpu
  expect_usage "--kv-cache-type must be f16, f32, q8_0 or q4_0" "${base[@]}" --kv-cache-type q5_0
done
expect_usage "--kv-cache-type must be f16, f32, q8_0 or q4_0" chat --model /m --kv-cache-type bf16
expect_usage "--device must be cpu or cuda" chat --model /m --device tpu
expect_usage "mutually exclusive" "${gen[@]}" --regex a --grammar /g
expect_usage "needs a value" run --model /m --protocol chat - --draft
expect_usage "--kv-f32 and --kv-cache-type ask for different types" "${gen[@]}" --kv-f32 \
  --kv-cache-type q8_0
# (f16 named beside --kv-f32 too: it ran f32 without a word)
expect_usage "--kv-f32 and --kv-cache-type ask for different types" "${gen[@]}" --kv-f32 \
  --kv-cache-type f16
# an unknown option last is unknown, not one missing its value
expect_usage "unknown option '--foo'" "${gen[@]}" --foo
expect_usage "unknown option '--verbose'" logits --model /m --tokens 1 --out /o --verbose
expect_usage "missing value after --threads" "${gen[@]}" --threads
expect_usage "missing value after --out" logits --model /m --tokens 1 --out
echo "ok: cli usage"
