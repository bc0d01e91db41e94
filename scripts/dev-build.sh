#!/usr/bin/env bash
# Incremental developer build: compiles fastcomp._C into build/dev and drops it next to the Python sources,
# so `PYTHONPATH=python pytest` runs against this checkout without reinstalling.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ ! -f build/dev/build.ninja ]; then
  cmake -S . -B build/dev -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} \
    -DPython_EXECUTABLE="$(command -v "$py")" -Dpybind11_DIR="$("$py" -m pybind11 --cmakedir)" >/dev/null
fi
cmake --build build/dev
cp -f build/dev/_C*.so python/fastcomp/
