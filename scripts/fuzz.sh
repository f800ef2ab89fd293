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
  "$build/tests/fuzz_$name" -max_total_time="$seconds" -print_final_stats=0 \
      -artifact_prefix="$build/crashes/$name-" "$work" 2>&1 | tail -n 3
done
echo "ok: fuzz targets ran without a crash"
