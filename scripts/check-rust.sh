#!/usr/bin/env bash
# The Rust binding's checks (scripts/test.sh's "rust binding" step), against a
# build of the library: install it into a staging prefix, then, in bindings/rust,
# check that deepinfer-sys's bindings.rs equals a fresh bindgen run, rustfmt,
# clippy with warnings as errors (tests and examples too), `cargo test` (unit,
# integration and doc tests; SmolLM2 and the `deepinfer` command are the oracles,
# and a missing model fails), and run every example. Where `cargo` is not
# Debian's (rustup's, on this image), the crates are also built with Debian 12's
# cargo and rustc 1.63, the minimum the crates declare.
#   scripts/check-rust.sh BUILD_DIR [ASSET_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
assets=${2:-$("$root/scripts/fetch_assets.py" --asset-dir)}
prefix=$root/build/rust-install
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(find "$prefix" -name deepinfer.pc -print -quit)
[ -n "$pc" ] || { echo "FAIL: no deepinfer.pc installed" >&2; exit 1; }
# build.rs finds the library through pkg-config; the tests and examples load it
# from the staging prefix and run its deepinfer command as their oracle.
export PKG_CONFIG_PATH=$(dirname "$pc")
LD_LIBRARY_PATH=$(pkg-config --variable=libdir deepinfer)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
export DEEPINFER_CLI=$prefix/bin/deepinfer DI_ASSET_DIR=$assets DI_REQUIRE_ASSETS=1

# rustup's cargo and rustfmt proxies with no toolchain for this HOME (a fresh HOME on an image
# whose rustup lives in another's): Debian's toolchain instead (scripts/setup.sh)
if ! cargo --version >/dev/null 2>&1 && [ -x /usr/bin/cargo ]; then
  echo "note: $(command -v cargo || echo cargo) does not run here; using Debian's $(/usr/bin/cargo --version)"
  PATH=/usr/bin:$PATH
  export PATH
fi
"$root/scripts/rust-bindgen.sh" --check
cd "$root/bindings/rust"
# No dependencies, so the lock file is trivial; cargo 1.65 cannot read the format
# newer cargos write, so it is made afresh (it is not committed).
rm -f Cargo.lock
if [ -x /usr/bin/cargo ] && [ "$(command -v cargo)" != /usr/bin/cargo ]; then
  home=$(mktemp -d)
  CARGO_HOME=$home RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc CARGO_TARGET_DIR=target/debian12 \
    /usr/bin/cargo build --offline --quiet --all-targets
  rm -rf "$home"
  echo "ok: the crates and their tests and examples build with $(/usr/bin/rustc --version)"
fi
cargo fmt --all --check
cargo clippy --offline --quiet --all-targets -- -D warnings
echo "ok: rustfmt and clippy ($(cargo clippy --version)) clean"
cargo test --offline --quiet
for example in codec chat tool_call cancel; do
  out=$(cargo run --offline --quiet --example "$example" 2>&1) ||
    { echo "$out" | tail -n 20 >&2; echo "FAIL: cargo run --example $example" >&2; exit 1; }
done
echo "ok: the examples codec, chat, tool_call and cancel ran"
