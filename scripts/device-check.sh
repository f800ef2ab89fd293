#!/usr/bin/env bash
# The CUDA backend's checks on a machine with an NVIDIA GPU (docs/cuda.md), one
# command from the repository root, under 8 minutes on an H200:
#   scripts/device-check.sh
# 1. build with CUDA (nvcc for sm_90a + compute_90, warnings as errors), the
#    library, the module and the CUDA tests only;
# 2. the CUDA tests: the module seam (ctest -L cuda) and, on the GPU, every
#    tiny dense fixture against the CPU backend — logits within the fixture's
#    tolerance, greedy tokens identical, determinism, batch invariance
#    (ctest -L cuda-gpu; a fixture the CUDA backend refuses is listed, not
#    hidden; a skip for want of a GPU is a failure here);
# 3. compute-sanitizer memcheck over a short run (one fixture, f16 KV cache);
# 4. the batch-1 decode benchmark: the device-to-device copy bandwidth, then
#    decode bytes/s of a 7B-shaped Llama (4 layers, random weights) in bf16 and
#    Q4_K, and their fraction of the copy bandwidth (and a 64-token prefill's
#    tokens/s and TFLOP/s).
# Writes summary.txt and log.txt under $OUT when set (else build/device-check/).
# Needs cmake, ninja, nvcc (PATH or /usr/local/cuda/bin), python3 with numpy,
# and the C libraries of the build (jansson, oniguruma, utf8proc, xxhash,
# zstd, cmocka, pkg-config): where the machine lacks them, run
# scripts/device-deps.sh beforehand on a machine with apt and carry .devdeps/.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
out=${OUT:-$root/build/device-check}
mkdir -p "$out"
log=$out/log.txt
summary=$out/summary.txt
: >"$log"
: >"$summary"
t_start=$(date +%s)
fail=0
say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(($(date +%s) - t_start)); }
run() { "$@" >>"$log" 2>&1; }

say "deepinfer device-check $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(date -u +%FT%TZ)"
if command -v nvidia-smi >/dev/null; then
  say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
else
  say "gpu: nvidia-smi not found"
fi
export PATH=$PATH:/usr/local/cuda/bin
command -v nvcc >/dev/null || { say "FAIL: nvcc not found"; exit 1; }
say "nvcc: $(nvcc --version | tail -1)"

# The build's C libraries, carried as .debs where the image lacks them.
if ! pkg-config --exists jansson oniguruma libutf8proc libxxhash libzstd cmocka 2>/dev/null; then
  if [ -d .devdeps ]; then
    deps=/tmp/di-deps
    mkdir -p $deps
    for f in .devdeps/*.deb; do dpkg -x "$f" $deps; done
    libdir=$deps/usr/lib/x86_64-linux-gnu
    export PATH=$deps/usr/bin:$PATH LD_LIBRARY_PATH=$libdir:${LD_LIBRARY_PATH:-}
    export PKG_CONFIG_SYSROOT_DIR=$deps PKG_CONFIG_PATH=$libdir/pkgconfig:$deps/usr/share/pkgconfig
    export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
    say "deps: unpacked .devdeps into $deps"
  else
    say "FAIL: the C libraries (jansson oniguruma utf8proc xxhash zstd cmocka) are missing;"
    say "      run scripts/device-deps.sh where apt works and carry .devdeps/"
    exit 1
  fi
fi

# 1. build
b=build/device-check-build
t=$(date +%s)
if run cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDI_WERROR=ON -DDI_CUDA=ON \
       -DDI_BUILD_EXAMPLES=OFF -DDI_BUILD_BENCH=OFF &&
   run cmake --build $b -j "${DI_JOBS:-$(nproc)}" --target deepinfer deepinfer_cuda test_cuda_module \
       test_cuda_dequant test_cuda_parity test_cuda_engine bench_cuda_decode; then
  say "build: ok ($(($(date +%s) - t)) s)"
else
  say "FAIL: build (log.txt)"
  tail -n 30 "$log"
  exit 1
fi

# 2. tests
t=$(date +%s)
if run ctest --test-dir $b -L '^cuda$' --output-on-failure --timeout 60; then
  say "seam tests (ctest -L cuda): ok"
else
  say "FAIL: seam tests (ctest -L cuda)"
  fail=1
fi
ctest --test-dir $b -L '^cuda-gpu$' --output-on-failure -V -j 8 --timeout 120 >"$out/gpu-tests.txt" 2>&1
gpu_rc=$?
cat "$out/gpu-tests.txt" >>"$log"
grep -E '^[0-9]+: ([^ ]+: (prefill|decode|batch invariance)|SKIP|FAIL|ok:|greedy|seeded)' \
     "$out/gpu-tests.txt" |
  sed 's/^/  /' >>"$summary"
n_pass=$(grep -cE 'Test +#[0-9]+: .*Passed' "$out/gpu-tests.txt" || true)
n_skip=$(grep -cE 'Test +#[0-9]+: .*Skipped' "$out/gpu-tests.txt" || true)
say "gpu tests (ctest -L cuda-gpu): $n_pass passed, $n_skip skipped, rc $gpu_rc ($(($(date +%s) - t)) s)"
if [ $gpu_rc -ne 0 ]; then fail=1; say "FAIL: gpu tests"; fi
if grep -qE 'SKIP: .*(no NVIDIA driver|cudaGetDeviceCount|no CUDA device|compute capability|module not found|cuInit)' \
     "$out/gpu-tests.txt"; then
  say "FAIL: the GPU tests skipped for want of a usable GPU on a GPU machine"
  fail=1
fi

# 3. compute-sanitizer memcheck over a short run
t=$(date +%s)
export DI_CUDA_MODULE=$root/$b/lib/libdeepinfer-cuda.so
if command -v compute-sanitizer >/dev/null; then
  if run timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 \
       $b/tests/cuda/test_cuda_parity tests/fixtures/model/llama-gqa-f16 2e-3 --kv-f16; then
    say "compute-sanitizer memcheck (llama-gqa-f16): ok ($(($(date +%s) - t)) s)"
  else
    say "FAIL: compute-sanitizer memcheck (log.txt)"
    fail=1
  fi
else
  say "FAIL: compute-sanitizer not found"
  fail=1
fi

# 4. benchmark: batch-1 decode bytes/s against the copy bandwidth
for kind in bf16 q4_k; do
  t=$(date +%s)
  f=/tmp/di-bench-$kind.gguf
  if run python3 scripts/make_cuda_bench_gguf.py $f $kind 4 &&
     $b/tests/cuda/bench_cuda_decode $f cuda 64 >"$out/bench-$kind.txt" 2>>"$log"; then
    say "bench 7B-shaped (4 layers) $kind: $(tr '\n' ' ' <"$out/bench-$kind.txt")($(($(date +%s) - t)) s)"
  else
    say "FAIL: bench $kind (log.txt)"
    fail=1
  fi
  rm -f $f
done

say "total: $(elapsed) s; $([ $fail -eq 0 ] && echo 'all checks passed' || echo 'FAILED')"
exit $fail
