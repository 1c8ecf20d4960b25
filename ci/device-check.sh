#!/usr/bin/env bash
# One prepared pass on an accelerator: the tiny matrix, the bug classes, and the
# qwen3-14b device tier, each run writing its own JSON under OUT (default reports/device).
#   DEVICE=cuda:0 OUT=/tmp/out bash ci/device-check.sh
# Uses the host's python3/torch (no install): PYTHONPATH=. is enough.
set -uo pipefail
cd "$(dirname "$0")/.."
DEVICE="${DEVICE:-cuda:0}"
OUT="${OUT:-reports/device}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py() { python3 -m harness "$@" --device "$DEVICE" --no-progress --golden-cache "$OUT/goldens" --log-dir "$OUT/logs"; }
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
start=$(date +%s)
py run cases --tier ci --json "$OUT/tiny.json" | tail -4
py run ci/bug-classes.yaml --kernel-path tests/kernels_under_test --json "$OUT/bugs.json" | grep -E "^\[" | cut -c1-110
py run cases/device/qwen3-14b-decode.yaml --json "$OUT/qwen3-decode.json" | tail -4
py run cases/device/qwen3-14b-layers.yaml -k "num_layers=40 and arange or warmup" --json "$OUT/qwen3-layers.json" | grep -E "^\[|cases:"
py run cases/device/qwen3-14b-prefill.yaml -k "batch=1 and chunk_size=512" --json "$OUT/qwen3-prefill.json" | grep -E "^\[|cases:"
echo "total $(( $(date +%s) - start )) s"
