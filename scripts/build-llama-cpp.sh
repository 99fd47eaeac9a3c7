#!/usr/bin/env bash
# Builds llama.cpp (CPU only) from the sources vendored in the llama-cpp-python sdist, for
# bench/llama-cpp.ts (issue 49, point 6). Idempotent: a second run reuses the download, the
# extracted sources and the build. Not part of `npm test` (it compiles for several minutes on 2 cores).
#
#   bash scripts/build-llama-cpp.sh            # fetch, extract, build; prints the binaries' folder
#
# Environment: MCP_GYM_LLAMA_CPP_DIR (default ~/.cache/mcp-gym/llama-cpp), LLAMA_CPP_PYTHON_VERSION
# (default 0.3.36), JOBS (default 2), PYTHON (default .venv/bin/python, else python3; used for pip).
# Layout under the cache dir: sdist/ (the .tar.gz), src/ (vendor/llama.cpp), build/bin/ (the tools).
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
root="${MCP_GYM_LLAMA_CPP_DIR:-$HOME/.cache/mcp-gym/llama-cpp}"
jobs="${JOBS:-2}"
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$here/.venv/bin/python" ]; then python="$here/.venv/bin/python"; else python=python3; fi
fi
targets=(llama-batched-bench llama-bench llama-batched)

mkdir -p "$root/sdist"
sdist="$root/sdist/llama_cpp_python-$version.tar.gz"
if [ ! -f "$sdist" ]; then
  echo "fetching the llama-cpp-python $version sdist with pip download" >&2
  "$python" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$root/sdist"
fi

src="$root/src-$version"
if [ ! -f "$src/.complete" ]; then
  echo "extracting vendor/llama.cpp into $src" >&2
  rm -rf "$src" "$src.tmp"
  mkdir -p "$src.tmp"
  tar xzf "$sdist" -C "$src.tmp" --strip-components=3 "llama_cpp_python-$version/vendor/llama.cpp"
  # The sdist keeps a submodule's .git file pointing outside the archive: drop it so that
  # cmake's git probes do not fail on it.
  rm -f "$src.tmp/.git"
  touch "$src.tmp/.complete"
  mv "$src.tmp" "$src"
fi

build="$root/build-$version"
if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "configuring $build" >&2
  nice -n 19 cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >&2
fi
echo "building ${targets[*]} (-j$jobs, nice 19)" >&2
nice -n 19 cmake --build "$build" --config Release -j "$jobs" --target "${targets[@]}" >&2

for t in "${targets[@]}"; do
  [ -x "$build/bin/$t" ] || { echo "missing $build/bin/$t" >&2; exit 1; }
done
echo "$build/bin"
