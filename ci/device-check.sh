#!/usr/bin/env bash
# One prepared pass on an accelerator: the tiny matrix, the bug classes, and the
# qwen3-14b device tier, each run writing its own JSON under OUT (default reports/device).
#   DEVICE=cuda:0 OUT=/tmp/out bash ci/device-check.sh
#   OUT=/tmp/out bash ci/device-check.sh npu       # on an Ascend host (CANN's set_env.sh sourced), docs/ascend.md
# Uses the host's python3/torch (no install): PYTHONPATH=. is enough.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-cuda}"
if [ "$MODE" = npu ]; then
  DEVICE="${DEVICE:-npu:0}"
  OUT="${OUT:-reports/device}"
  mkdir -p "$OUT"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
  python3 -c 'import torch, torch_npu; print("torch", torch.__version__, "torch_npu", torch_npu.__version__,
        torch.npu.device_count(), "NPUs:", torch.npu.get_device_name(0))' || exit 2
  npu() { python3 -m harness "$@" --no-progress --golden-cache "$OUT/goldens" --log-dir "$OUT/logs"; }
  start=$(date +%s)
  npu run cases --device "$DEVICE" --tier ci --json "$OUT/npu-tiny.json"
  npu run ci/bug-classes.yaml --device "$DEVICE" --kernel-path tests/kernels_under_test --json "$OUT/npu-bugs.json"
  # one NPU per worker: two workers, each must report its own device (metrics and ASCEND_RT_VISIBLE_DEVICES)
  if [ "$(python3 -c 'import torch, torch_npu; print(torch.npu.device_count())')" -ge 2 ]; then
    npu run cases/rope_kv_write.yaml --devices npu:0-1 --json "$OUT/npu-pinning.json"
  fi
  npu run cases/device/qwen3-14b-decode.yaml --device "$DEVICE" --json "$OUT/npu-qwen3-decode.json"
  ls -R "$OUT/logs" | grep -c plog || true     # device log directories per worker (docs/ascend.md)
  echo "total $(( $(date +%s) - start )) s"
  exit 0
fi
DEVICE="${DEVICE:-cuda:0}"
OUT="${OUT:-reports/device}"
mkdir -p "$OUT" "${WORK:-$OUT}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
WORK="${WORK:-$OUT}"   # goldens and logs (many files); OUT gets the JSON reports
py() { python3 -m harness "$@" --device "$DEVICE" --no-progress --golden-cache "$WORK/goldens" --log-dir "$WORK/logs"; }
# Failures and the closing count only; every result is in the JSON files.
brief() { grep -E "^\[|cases:|^    " | grep -vE "^\[[0-9/]+\] (PASS|SKIPPED) " | cut -c1-160; }
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
start=$(date +%s)
# inputs: the same bytes (digest) on the host and the device, and the device's draw speed
python3 bench/bench_device_inputs.py --device "$DEVICE" --layers 40 --repeats 2
# the checks on the device: the CPU's outcome, summary and report for every bug class
python3 ci/checks_on_device.py --device "$DEVICE" | grep -vE "^same "
py run cases --tier ci --json "$OUT/tiny.json" | brief
py run ci/bug-classes.yaml --kernel-path tests/kernels_under_test --json "$OUT/bugs.json" | brief
py run cases/device/triton.yaml --json "$OUT/triton.json" | brief
py run cases/device/qwen3-14b-decode.yaml --json "$OUT/qwen3-decode.json" | brief
py run cases/device/qwen3-14b-layers.yaml -k "num_layers=40 and arange or warmup" --json "$OUT/qwen3-layers.json" | brief
# the 40-layer case's breakdown: inputs, golden, launch, checks
python3 -c 'import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    t = r.get("metrics", {}).get("timings", {})
    print(r["case_id"], r["outcome"], " ".join(f"{k} {t[k]:.2f}" for k in ("inputs_s", "golden_s", "launch_s", "check_s") if k in t),
          "digest", r.get("metrics", {}).get("inputs_digest"))' "$OUT/qwen3-layers.json"
py run cases/device/qwen3-14b-prefill.yaml -k "batch=1 and chunk_size=512" --json "$OUT/qwen3-prefill.json" | brief
# latency (docs/latency.md): the qwen3-14b decode cases timed after their checks pass (device
# events, cold L2), each case's median and achieved GB/s against the device's HBM peak
py run cases/device/qwen3-14b-decode.yaml --latency --latency-budget 2 --json "$OUT/qwen3-latency.json" | brief
python3 ci/latency_figures.py "$OUT/qwen3-latency.json"
echo "total $(( $(date +%s) - start )) s"
