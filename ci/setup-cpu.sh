#!/usr/bin/env bash
# Set up (or refresh) a CPU-only environment in .venv. Idempotent: fast when already done.
#
# Pinned: every package comes at the version ci/constraints-cpu.txt names, so a fresh clone
# resolves the same set every day and an upstream release cannot turn CI red overnight.
# `bash ci/setup-cpu.sh --latest` instead builds .venv-latest from today's releases (what
# ci/test-latest.sh tests against); the pinned .venv is left alone.
#
# torch is pinned to the CPU build here: an unpinned `pip install torch` pulls a
# multi-GB CUDA build. NPU and GPU hosts install their own torch (+ torch-npu /
# triton via the `npu` / `cuda` extras) instead of running this script. The `test` extra
# brings what the tests need, triton's CPU interpreter included (it depends on no torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
VENV=.venv
PINS=(--constraint ci/constraints-cpu.txt)
if [ "${1:-}" = "--latest" ]; then
  VENV=.venv-latest
  PINS=(--upgrade --upgrade-strategy eager)
elif [ -n "${1:-}" ]; then
  echo "ci/setup-cpu.sh: unknown argument '$1' (expected nothing or --latest)" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
"${PIP[@]}" "${PINS[@]}" "torch==2.13.0"
"${PIP[@]}" "${PINS[@]}" -e ".[test]"
