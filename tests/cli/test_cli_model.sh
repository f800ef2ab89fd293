#!/usr/bin/env bash
# The deepinfer generate / logits contract on a tiny transformers checkpoint
# (tests/fixtures/model/): greedy IDs as a JSON array equal to the transformers
# oracle's, logits as raw f32 of the right size, and one-line errors for bad
# token IDs, empty token lists and context overflow.
set -uo pipefail
cli=$1
dir=$2 # a tiny checkpoint folder with reference.json
kv_bytes=$3 # KV cache bytes per token (f16) --verbose must report: the formula of the model's cache
fail() { echo "FAIL: $*" >&2; exit 1; }

prompt=$(sed -n '/"prompt"/,/]/p' "$dir/reference.json" | tr -d ' \n' | sed 's/"prompt":\[//; s/\],*$//')
greedy=$(sed -n '/"greedy"/,/]/p' "$dir/reference.json" | tr -d ' \n' | sed 's/"greedy"://; s/,$//')
n_prompt=$(echo "$prompt" | tr ',' '\n' | wc -l)

out=$("$cli" generate --model "$dir" --tokens "$prompt" --max-tokens 32 --threads 2 --kv-f32) ||
  fail "generate exited $?"
[ "$out" = "$greedy" ] || fail "generate printed $out, transformers $greedy"
err=$("$cli" generate --model "$dir" --tokens "$prompt" --max-tokens 4 --verbose 2>&1 >/dev/null) ||
  fail "generate --verbose exited $?"
[[ "$err" == *"KV cache $kv_bytes bytes per token (f16)"* ]] ||
  fail "--verbose did not report $kv_bytes KV bytes per token: $err"
[[ "$err" == *"decode 3 tokens"*"tokens/s"* ]] || fail "--verbose did not report decode speed: $err"
[[ "$err" == *"CPU kernels: "*"avx2+fma+f16c"* || "$err" == *"CPU kernels: scalar reference"* ]] ||
  fail "--verbose did not name the CPU kernels: $err"
out=$("$cli" generate --model "$dir" --tokens "$prompt" --max-tokens 0) || fail "max-tokens 0 exited $?"
[ "$out" = "[]" ] || fail "max-tokens 0 printed $out"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cli" logits --model "$dir" --tokens "$prompt" --out "$tmp/l.f32" || fail "logits exited $?"
size=$(stat -c %s "$tmp/l.f32")
[ "$size" -eq $((n_prompt * 512 * 4)) ] || fail "logits wrote $size bytes, want $((n_prompt * 512 * 4))"

err=$("$cli" generate --model "$dir" --tokens 1,512,3 --max-tokens 2 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "token 512 of a 512-token vocabulary exited $rc, want 1"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "more than one line: $err"
[[ "$err" == *"tokens[1] = 512"* ]] || fail "message does not name the token: $err"
err=$("$cli" logits --model "$dir" --tokens 1,-4 --out "$tmp/x" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "negative token exited $rc, want 1"
[[ "$err" == *"tokens[1] = -4"* ]] || fail "message does not name the token: $err"
err=$("$cli" generate --model "$dir" --tokens "" --max-tokens 2 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "empty tokens exited $rc, want 2"
err=$("$cli" generate --model "$dir" --tokens 1,,2 --max-tokens 2 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "malformed tokens exited $rc, want 2"
# the checkpoint's context is 256 tokens (max_position_embeddings)
long=$(seq -s, 3 300)
err=$("$cli" logits --model "$dir" --tokens "$long" --out "$tmp/x" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "298 tokens in a 256-token context exited $rc, want 1"
[[ "$err" == *"exceed the context of 256"* ]] || fail "message does not say the context: $err"
err=$("$cli" generate --model "$dir" --tokens 3,4 --max-tokens 300 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "generating past the context exited $rc, want 1"
[[ "$err" == *"context"* ]] || fail "message does not say the context: $err"
err=$("$cli" generate --model "$dir/nope" --tokens 3 --max-tokens 1 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "a missing model exited $rc, want 1"
err=$("$cli" generate --model "$dir" --tokens 3 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "missing --max-tokens exited $rc, want 2"
# a constraint needs the model's tokenizer (these checkpoints have none): exit
# 1 naming why; two constraints are a usage error
err=$("$cli" generate --model "$dir" --tokens 3,4 --max-tokens 2 --regex 'a+' 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "--regex without a tokenizer exited $rc, want 1"
[[ "$err" == *"no tokenizer"* ]] || fail "message does not say the tokenizer is missing: $err"
err=$("$cli" generate --model "$dir" --tokens 3 --max-tokens 2 --regex a --json-schema '{}' 2>&1 \
      >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "--regex with --json-schema exited $rc, want 2"
[[ "$err" == *"mutually exclusive"* ]] || fail "two constraints: $err"
# --device cuda where CUDA cannot run (this machine, or no module): exit 1 with
# the library's reason; the CPU path is --device cpu
if ! command -v nvidia-smi > /dev/null; then
  err=$("$cli" generate --model "$dir" --tokens 3,4 --max-tokens 2 --device cuda 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 1 ] || fail "--device cuda without a GPU exited $rc, want 1"
  [[ "$err" == *"cuda"* ]] || fail "--device cuda: the message does not say why: $err"
fi
out=$("$cli" generate --model "$dir" --tokens "$prompt" --max-tokens 4 --device cpu) ||
  fail "--device cpu exited $?"
[ "$out" = "$(echo "$greedy" | sed 's/^\[\([0-9]*,[0-9]*,[0-9]*,[0-9]*\).*/[\1]/')" ] ||
  fail "--device cpu printed $out, the first 4 of $greedy"
# --help prints the usage and succeeds; --ctx sets the context (a context of 2
# is exceeded by 3 tokens)
out=$("$cli" generate --help) || fail "generate --help exited $?"
[[ "$out" == *"--max-tokens N"*"--ctx N"* ]] || fail "generate --help printed: $out"
out=$("$cli" logits -h) || fail "logits -h exited $?"
[[ "$out" == *"--out FILE"* ]] || fail "logits -h printed: $out"
err=$("$cli" logits --model "$dir" --tokens 3,4,5 --ctx 2 --out "$tmp/x" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "3 tokens with --ctx 2 exited $rc, want 1"
[[ "$err" == *"exceed the context of 2"* ]] || fail "--ctx 2 did not say the context: $err"
err=$("$cli" logits --model "$dir" --tokens 3 --ctx x --out "$tmp/x" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "--ctx x exited $rc, want 2"
# a file of the folder named as the model: the folder is named in the error
err=$("$cli" logits --model "$dir/config.json" --tokens 3 --out "$tmp/x" 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "config.json as the model exited $rc, want 1"
[[ "$err" == *"is a file of a Hugging Face folder"*"$dir"* ]] || fail "config.json as the model: $err"
err=$("$cli" logits --model "$dir" --tokens 3 --max-tokens 3 --out x 2>&1 >/dev/null); rc=$?
[ "$rc" -eq 2 ] || fail "logits --max-tokens exited $rc, want 2"

# Speculative decoding through the engine (--draft, --draft-max, --speculative,
# --draft-model): the same greedy tokens as plain generate (the oracle here),
# whichever drafter; --verbose counts the drafts; a draft model that does not
# load is one line naming draft_model_path.
plain=$("$cli" generate --model "$dir" --tokens "$prompt" --max-tokens 24 --threads 2) ||
  fail "generate exited $?"
for flags in "--draft auto" "--draft prompt-lookup --draft-max 5" "--draft-max 3" \
             "--speculative 2" "--draft draft-model --draft-model $dir --draft-max 4" \
             "--draft-model $dir" "--draft off"; do
  # shellcheck disable=SC2086
  out=$("$cli" generate --model "$dir" --tokens "$prompt" --max-tokens 24 --threads 2 $flags \
        2> "$tmp/err") || fail "generate $flags exited $?: $(cat "$tmp/err")"
  [ "$out" = "$plain" ] || fail "generate $flags printed $out, without speculation $plain"
done
err=$("$cli" generate --model "$dir" --tokens "$prompt" --max-tokens 8 --draft draft-model \
      --draft-model "$dir" --verbose 2>&1 >/dev/null) || fail "generate --draft --verbose exited $?"
[[ "$err" == *"speculative decoding: "*" draft tokens verified, "*" kept"* ]] ||
  fail "--verbose did not count the drafts: $err"
err=$("$cli" generate --model "$dir" --tokens "$prompt" --max-tokens 4 --draft-model "$tmp/none" \
      2>&1 >/dev/null); rc=$?
[ "$rc" -eq 1 ] || fail "a missing draft model exited $rc, want 1"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "a missing draft model printed: $err"
[[ "$err" == *"draft_model_path: "* ]] || fail "the message does not name draft_model_path: $err"
# DeepSeek-V3's MTP module drafting (the tiny checkpoint with one): the same
# tokens, named or chosen by auto; a model without one is one line saying so.
err=$("$cli" generate --model "$dir" --tokens "$prompt" --max-tokens 4 --draft mtp 2>&1 >/dev/null)
rc=$?
[ "$rc" -eq 1 ] || fail "--draft mtp without an MTP layer exited $rc, want 1"
[[ "$err" == *"no MTP (NextN) layer"* ]] || fail "--draft mtp without MTP printed: $err"
# DeepSeek-V4's MTP layer likewise (dsv4-mtp-f32).
for name in dsv3-mtp-f32 dsv4-mtp-f32; do
  mtp=$(dirname "$dir")/$name
  plain=$("$cli" generate --model "$mtp" --tokens 5,9,200,31,77 --max-tokens 20 --threads 2) ||
    fail "generate ($name) exited $?"
  for flags in "--draft mtp --draft-max 3" "--draft auto" "--draft mtp --draft-max 1"; do
    # shellcheck disable=SC2086
    out=$("$cli" generate --model "$mtp" --tokens 5,9,200,31,77 --max-tokens 20 --threads 2 \
          $flags --verbose 2> "$tmp/err") || fail "generate $flags ($name) exited $?: $(cat "$tmp/err")"
    [ "$out" = "$plain" ] || fail "generate $flags ($name) printed $out, without speculation $plain"
    grep -q "speculative decoding: .* draft tokens verified, .* kept" "$tmp/err" ||
      fail "--verbose did not count the MTP drafts ($name): $(cat "$tmp/err")"
  done
done
# llama.cpp's files: a deepseek4 GGUF, its MTP GGUF (convert_hf_to_gguf.py --mtp)
# as the draft model; the MTP GGUF alone is one line saying what it is.
gg=$(dirname "$dir")/gguf-dsv4
plain=$("$cli" generate --model "$gg/dsv4-gguf-bf16.gguf" --tokens 5,9,200,31,77 --max-tokens 20 \
        --threads 2) || fail "generate (deepseek4 GGUF) exited $?"
for flags in "--draft mtp --draft-max 3" "--draft auto" "--draft draft-model"; do
  # shellcheck disable=SC2086
  out=$("$cli" generate --model "$gg/dsv4-gguf-bf16.gguf" --tokens 5,9,200,31,77 --max-tokens 20 \
        --threads 2 $flags --draft-model "$gg/dsv4-gguf-mtp.gguf" --verbose 2> "$tmp/err") ||
    fail "generate $flags --draft-model (MTP GGUF) exited $?: $(cat "$tmp/err")"
  [ "$out" = "$plain" ] || fail "generate $flags (MTP GGUF) printed $out, without speculation $plain"
  grep -q "speculative decoding: .* draft tokens verified" "$tmp/err" ||
    fail "--verbose did not count the MTP GGUF's drafts: $(cat "$tmp/err")"
done
err=$("$cli" generate --model "$gg/dsv4-gguf-mtp.gguf" --tokens 5,9 --max-tokens 2 2>&1 >/dev/null)
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "the MTP GGUF alone printed: $err"
[[ "$err" == *"is an MTP GGUF"* ]] || fail "the MTP GGUF alone: $err"
# DeepSeek-V4's DSpark head (dsv4-dspark-release; llama.cpp's files: the target's
# GGUF and its DSpark GGUF as the draft model): the same tokens, --verbose naming
# the drafter; the DSpark GGUF alone is one line saying what it is.
ds=$(dirname "$dir")/dsv4-dspark-release
plain=$("$cli" generate --model "$ds" --tokens 5,17,42,99,7 --max-tokens 20 --threads 2) ||
  fail "generate (DSpark folder) exited $?"
for run in "--model $ds --draft mtp --draft-max 4" "--model $ds --draft auto" \
           "--model $gg/dsv4-dspark-target.gguf --draft-model $gg/dsv4-dspark.gguf" \
           "--model $gg/dsv4-dspark-target.gguf --draft mtp --draft-model $gg/dsv4-dspark.gguf"; do
  # shellcheck disable=SC2086
  out=$("$cli" generate $run --tokens 5,17,42,99,7 --max-tokens 20 --threads 2 --verbose \
        2> "$tmp/err") || fail "generate $run exited $?: $(cat "$tmp/err")"
  [ "$out" = "$plain" ] || fail "generate $run printed $out, without speculation $plain"
  grep -q "the model's DSpark head drafts blocks of 4" "$tmp/err" ||
    fail "--verbose did not name the DSpark drafter ($run): $(cat "$tmp/err")"
done
# DeepSeek-V4.1's (dsv41-dspark-release): the same tokens with the head drafting
ds41=$(dirname "$dir")/dsv41-dspark-release
plain=$("$cli" generate --model "$ds41" --tokens 5,17,42,99,7 --max-tokens 20 --threads 2) ||
  fail "generate (V4.1 DSpark folder) exited $?"
out=$("$cli" generate --model "$ds41" --draft mtp --tokens 5,17,42,99,7 --max-tokens 20 \
      --threads 2 --verbose 2> "$tmp/err") || fail "generate V4.1 --draft mtp exited $?"
[ "$out" = "$plain" ] || fail "V4.1 --draft mtp printed $out, without speculation $plain"
grep -q "the model's DSpark head drafts blocks of 4" "$tmp/err" ||
  fail "--verbose did not name V4.1's DSpark drafter: $(cat "$tmp/err")"
err=$("$cli" generate --model "$gg/dsv4-dspark.gguf" --tokens 5,9 --max-tokens 2 2>&1 >/dev/null)
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "the DSpark GGUF alone printed: $err"
[[ "$err" == *"is a DSpark GGUF"*"--draft-model"* ]] || fail "the DSpark GGUF alone: $err"
# serve renders API requests on every route: a model without a tokenizer is
# refused at start (exit 1, one line saying what to give), never served 400s
if "$cli" serve --help >/dev/null 2>&1 && ! "$cli" serve --help | grep -q 'not built'; then
  err=$(timeout 20 "$cli" serve --model "$dir" --port 0 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 1 ] || fail "serve of a tokenizer-less model exited $rc, want 1: $err"
  [[ "$err" == *"cannot render API requests: it has no tokenizer"*"--tokenizer PATH"* ]] ||
    fail "serve of a tokenizer-less model: $err"
  # another model's tokenizer (SmolLM2's, 49,152 tokens, for a 512-token
  # vocabulary: its <|im_start|> is token 1, inside; so a made-up one whose
  # turn token lies past 512): the engine refuses the encoding naming the
  # token (di_engine_create), so serve never listens to answer 400s
  tok="$tmp/big-tokenizer.json"
  printf '%s' '{"version":"1.0","added_tokens":[{"id":600,"content":"<|im_start|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":601,"content":"<|im_end|>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":null,"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true},"post_processor":null,"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"vocab":{"a":0,"b":1},"merges":[]}}' >"$tok"
  err=$(timeout 20 "$cli" serve --model "$dir" --tokenizer "$tok" --encoding chatml --port 0 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 1 ] || fail "serve with another model's tokenizer exited $rc, want 1: $err"
  [[ "$err" == *"encoding: the tokenizer's <|im_start|> is token 600, past the model's vocabulary of 512, which encoding chatml needs"* ]] ||
    fail "serve with another model's tokenizer: $err"
  # the same without --encoding: the engine keeps no codec, serve says so
  err=$(timeout 20 "$cli" serve --model "$dir" --tokenizer "$tok" --port 0 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 1 ] || fail "serve with another model's tokenizer (no --encoding) exited $rc: $err"
  [[ "$err" == *"cannot render API requests"* ]] ||
    fail "serve with another model's tokenizer (no --encoding): $err"
fi
echo ok
