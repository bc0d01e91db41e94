#!/usr/bin/env bash
# Incremental developer build: compiles fastcomp._C into build/dev and drops it next to the Python sources,
# so `PYTHONPATH=python pytest` runs against this checkout without reinstalling.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
build=${BUILD_DIR:-build/dev}
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} \
    -DPython_EXECUTABLE="$(command -v "$py")" -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" >/dev/null
fi
cmake --build "$build"
# Copied then renamed: a process that has the old library loaded (a test run) keeps its file, not a rewrite.
for so in "$build"/_C*.so; do
  cp -f "$so" "python/fastcomp/.$(basename "$so").new" && mv -f "python/fastcomp/.$(basename "$so").new" "python/fastcomp/$(basename "$so")"
done
