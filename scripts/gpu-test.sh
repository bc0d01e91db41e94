#!/usr/bin/env bash
# Builds fastcomp on a GPU machine that has no network (torch, pybind11, scikit-build-core, CUDA and spdlog
# preinstalled) and runs the whole test suite there, GPU tests included. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --no-build-isolation --no-deps -q -e . 2>&1 | grep -v "Running pip as the 'root' user" || true
python3 -c "import torch, fastcomp; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else '')"
python3 -m pytest -q tests "$@"
