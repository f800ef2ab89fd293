#!/usr/bin/env bash
# The README's main command: set up a fresh Debian machine, build deepinfer in
# release mode, install it under build/install, and run the main job.
#   scripts/run.sh
# The main job grows with the project: today it is the installed `deepinfer`
# command reporting the library it runs on and listing its commands. When the
# codec lands it renders a sample request; when the model runtime lands it runs a
# real model. Builds in build/run, apart from the test command's build dirs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh
cmake -S . -B build/run -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build/run -j "$(nproc)"
cmake --install build/run --prefix "$root/build/install" >/dev/null
"$root/build/install/bin/deepinfer" version
"$root/build/install/bin/deepinfer" help
