#!/usr/bin/env bash
# Install a build into a staging prefix and build examples/hello against the
# *installed* library twice — through pkg-config and through find_package — and run
# both, plus the installed deepinfer command.
#   scripts/check-install.sh BUILD_DIR PREFIX
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1 prefix=$2
rm -rf "$prefix" "$prefix-consumers"
cmake --install "$build" --prefix "$prefix" >/dev/null
mkdir -p "$prefix-consumers"

pc=$(find "$prefix" -name deepinfer.pc -print -quit)
[ -n "$pc" ] || { echo "FAIL: no deepinfer.pc installed" >&2; exit 1; }
libdir=$(dirname "$(find "$prefix" -name 'libdeepinfer.so.0' -print -quit)")

# 1. pkg-config, shared and static.
export PKG_CONFIG_PATH=$(dirname "$pc")
cc -Wall -Wextra -Werror "$root/examples/hello/hello.c" $(pkg-config --cflags --libs deepinfer) \
   -o "$prefix-consumers/hello-pkgconfig"
LD_LIBRARY_PATH=$libdir "$prefix-consumers/hello-pkgconfig"
cc -Wall -Wextra -Werror "$root/examples/hello/hello.c" $(pkg-config --cflags deepinfer) \
   "$(pkg-config --variable=libdir deepinfer)/libdeepinfer.a" \
   $(pkg-config --static --libs-only-l deepinfer | sed 's/-ldeepinfer//') \
   -o "$prefix-consumers/hello-pkgconfig-static"
"$prefix-consumers/hello-pkgconfig-static"

# 2. find_package(deepinfer), shared and static targets.
cmake -S "$root/examples/hello" -B "$prefix-consumers/cmake" -G Ninja \
      -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$prefix-consumers/cmake" >/dev/null
LD_LIBRARY_PATH=$libdir "$prefix-consumers/cmake/hello"
"$prefix-consumers/cmake/hello_static"

# 3. The installed command finds its library through its RPATH.
env -u LD_LIBRARY_PATH "$prefix/bin/deepinfer" version
for f in include/deepinfer/deepinfer.h include/deepinfer/deepinfer.hpp; do
  [ -f "$prefix/$f" ] || { echo "FAIL: $f not installed" >&2; exit 1; }
done
echo "ok: installed library used through pkg-config and find_package"
