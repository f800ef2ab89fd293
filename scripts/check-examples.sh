#!/usr/bin/env bash
# Build the host examples — examples/embed, examples/agent, examples/game, examples/cpp — against
# an *installed* deepinfer, through pkg-config and through find_package, with
# warnings as errors; then run them on SmolLM2-135M-Instruct and check what greedy
# decoding makes deterministic (examples/README.md). Without the model the runs are
# skipped, saying so.
#   scripts/check-examples.sh PREFIX [ASSET_DIR]
# PREFIX is an install (scripts/check-install.sh makes one); ASSET_DIR defaults to
# scripts/fetch_assets.py --asset-dir.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$1
assets=${2:-$("$root/scripts/fetch_assets.py" --asset-dir)}
out=$prefix-examples
rm -rf "$out"
mkdir -p "$out"

pc=$(find "$prefix" -name deepinfer.pc -print -quit)
[ -n "$pc" ] || { echo "FAIL: no deepinfer.pc under $prefix" >&2; exit 1; }
libdir=$(dirname "$(find "$prefix" -name 'libdeepinfer.so.0' -print -quit)")
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
flags=(-std=c17 -Wall -Wextra -Wpedantic -Werror)

# 1. pkg-config (the agent also takes jansson's flags).
for ex in embed game agent; do
  deps=deepinfer
  [ "$ex" = agent ] && deps="deepinfer jansson"
  # shellcheck disable=SC2046,SC2086
  cc "${flags[@]}" "$root/examples/$ex/$ex.c" $(pkg-config --cflags --libs $deps) -o "$out/$ex"
done

# 2. find_package(deepinfer): each example's own CMakeLists.txt.
for ex in embed game agent; do
  cmake -S "$root/examples/$ex" -B "$out/cmake-$ex" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_C_FLAGS="${flags[*]}" >/dev/null
  cmake --build "$out/cmake-$ex" >/dev/null
done
# 3. The C++17 wrapper's example, with g++ and clang++ and a strict C++ host's
# warnings (deepinfer.hpp must compile clean under them), and through find_package.
cxxflags=(-std=c++17 -Wall -Wextra -pedantic -Wold-style-cast -Werror)
for cxx in g++ clang++; do
  command -v "$cxx" >/dev/null || { echo "skip: $cxx not installed"; continue; }
  # shellcheck disable=SC2046
  "$cxx" "${cxxflags[@]}" "$root/examples/cpp/chat.cpp" $(pkg-config --cflags --libs deepinfer) \
    -o "$out/chat_cpp-$cxx"
done
cmake -S "$root/examples/cpp" -B "$out/cmake-cpp" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_CXX_FLAGS="${cxxflags[*]}" >/dev/null
cmake --build "$out/cmake-cpp" >/dev/null
echo "ok: embed, game, agent and the C++ chat built against the installed library (pkg-config, find_package)"

model=$assets/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$model" ]; then
  echo "skip: running the examples needs $model (scripts/fetch_assets.py fetches it)"
  exit 0
fi

export LD_LIBRARY_PATH=$libdir
fail() { echo "FAIL: $*" >&2; exit 1; }
# run NAME BINARY: run one example on the model (a time limit guards against a hang),
# its output in $out/NAME.log; a non-zero status fails.
run() {
  local name=$1 bin=$2 rc=0
  timeout 300 "$bin" "$model" >"$out/$name.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || { cat "$out/$name.log" >&2; fail "$name exited with status $rc"; }
}
count() { grep -c -E "$1" "$2" || true; }

# embed: one request, one DONE that says ok, some text before it.
run embed "$out/embed"
[ "$(count '^\[ok: ' "$out/embed.log")" = 1 ] || fail "embed: expected exactly one '[ok: …]' DONE line"
[ "$(count '^\[' "$out/embed.log")" = 1 ] || fail "embed: a second DONE line"
[ "$(head -c 1 "$out/embed.log")" != "[" ] || fail "embed: no text streamed before DONE"
echo "ok: embed: $(tail -n 1 "$out/embed.log")"

# game: the example checks its guarantees itself (one DONE per request, the cancel
# landed mid-stream, the second line finished) and exits 1 otherwise; here, that
# it said so, that the cancel happened in the loop, and the frame statistics.
run game "$out/game"
grep -q '^ok: one DONE each; the cancel landed mid-stream$' "$out/game.log" || fail "game: no ok line"
grep -q 'the player walks away after [0-9]* tokens: di_cancel' "$out/game.log" ||
  fail "game: the cancel was not reported"
grep -E '^frames: ' "$out/game.log" || fail "game: no frame-time statistics"

# agent: every turn ended with one DONE (the example checks) and ok; the first turn,
# with tool_choice "required", called a tool and the tool's result went back.
run agent "$out/agent"
turns=$(count '^  \[turn done: ' "$out/agent.log")
[ "$turns" = "$(count '^  \[turn done: ok, ' "$out/agent.log")" ] || fail "agent: a turn did not end ok"
[ "$turns" -ge 1 ] || fail "agent: no turn ended"
grep -q '^  tool call: ' "$out/agent.log" || fail "agent: the required first turn called no tool"
grep -E '^(final answer after|no final answer within) [0-9]+ turns$' "$out/agent.log" ||
  fail "agent: the conversation did not end"
# A question the model answers with a call its tool cannot serve (the weather of a
# city it does not know): the error goes back as the tool's result and the
# conversation goes on.
timeout 300 "$out/agent" "$model" "Add 2 and 3." >"$out/agent-bad-call.log" 2>&1 ||
  { cat "$out/agent-bad-call.log" >&2; fail "agent: a bad tool call ended the run"; }

# The C++ chat: an answer streamed, a tool call, a cancelled story (the example
# checks each and exits 1 otherwise).
run chat_cpp "$out/chat_cpp-g++"
grep -q '^ok: answered, called a tool, cancelled the story$' "$out/chat_cpp.log" ||
  fail "chat_cpp: no ok line"
grep -q '^\[tool call: ' "$out/chat_cpp.log" || fail "chat_cpp: no tool call printed"

# The find_package builds of embed and game run too (their exit status: the
# examples' own checks).
for ex in embed game; do
  run "cmake-$ex" "$out/cmake-$ex/$ex"
done
echo "ok: the examples ran on SmolLM2-135M-Instruct"
