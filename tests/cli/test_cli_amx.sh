#!/usr/bin/env bash
# Prefill on AMX tiles gives the logits of the VNNI/AVX2 kernels bit for bit
# (both are the scalar reference's sums): deepinfer logits on the real SmolLM2
# Q4_1 file over 83 tokens (whole tiles of 16 and a remainder) with AMX
# allowed and with DI_CPU_AMX=0, at 1 and 2 threads, all four files equal.
# Says which kernels ran: without AMX on this CPU every run is VNNI/AVX2 and
# the check is only of thread invariance.
set -uo pipefail
cli=$1
model=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -f "$model" ] || { echo "skip: $model not fetched (scripts/fetch_assets.py)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tokens=$(seq 1 83 | awk '{printf "%s%d", (NR > 1 ? "," : ""), (NR * 7919) % 49000 + 17}')
for amx in 1 0; do
  for t in 1 2; do
    DI_CPU_AMX=$amx "$cli" logits --model "$model" --tokens "$tokens" --threads "$t" \
      --out "$tmp/l-$amx-$t.f32" || fail "logits (DI_CPU_AMX=$amx, $t threads) exited $?"
  done
done
size=$(stat -c %s "$tmp/l-1-1.f32")
[ "$size" -eq $((83 * 49152 * 4)) ] || fail "logits wrote $size bytes, want $((83 * 49152 * 4))"
for f in "$tmp"/l-*.f32; do
  cmp -s "$tmp/l-0-1.f32" "$f" || fail "$(basename "$f") differs from DI_CPU_AMX=0 at 1 thread"
done
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null; then
  echo "ok: amx-int8 prefill tiles and DI_CPU_AMX=0 (VNNI/AVX2) give identical logits, 1 and 2 threads"
else
  echo "ok: no amx-int8 on this CPU: both runs on VNNI/AVX2, identical at 1 and 2 threads"
fi
