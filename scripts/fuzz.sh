#!/usr/bin/env bash
# Build the libFuzzer targets with clang (ASan+UBSan) and run each one for a
# bounded time over a scratch copy of its committed corpus. New crashes fail the
# run and leave their input in build/fuzz/crashes/.
#   scripts/fuzz.sh [SECONDS_PER_TARGET]      (default 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-20}
build=$root/build/fuzz
CC=clang cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDI_FUZZ=ON -DDI_SANITIZE=address,undefined -DDI_CUDA=OFF -DDI_WERROR=ON >/dev/null
cmake --build "$build" --target fuzz
mkdir -p "$build/crashes"
for corpus in "$root"/tests/fuzz/corpus/*/; do
  name=$(basename "$corpus")
  work=$build/corpus/$name
  rm -rf "$work" && mkdir -p "$work" && cp -r "$corpus". "$work"/
  echo "fuzz: $name for ${seconds}s"
  # the whole log is printed when the target fails (the sanitizer's report), its
  # last lines otherwise
  log=$build/$name.log
  if ! "$build/tests/fuzz_$name" -max_total_time="$seconds" -print_final_stats=0 \
      -artifact_prefix="$build/crashes/$name-" "$work" > "$log" 2>&1; then
    cat "$log"
    echo "FAIL: fuzz_$name crashed; its input is in $build/crashes/" >&2
    exit 1
  fi
  tail -n 3 "$log"
done
echo "ok: fuzz targets ran without a crash"
