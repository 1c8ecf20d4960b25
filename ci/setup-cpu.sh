#!/usr/bin/env bash
# Set up (or refresh) a CPU-only environment in .venv. Idempotent: fast when already done.
#
# torch is pinned to the CPU build here: an unpinned `pip install torch` pulls a
# multi-GB CUDA build. NPU and GPU hosts install their own torch (+ torch-npu /
# triton via the `npu` / `cuda` extras) instead of running this script. The `test` extra
# brings what the tests need, triton's CPU interpreter included (it depends on no torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
