#!/usr/bin/env bash
# Run one shard of the case matrix on this host: what each job of the CI shard matrix calls
# (ci/github/harness-npu.yml).
#
#   ci/run-shard.sh I/N [CASE PATHS...]        (paths relative to the repository root; default: cases)
#
# Writes $HARNESS_REPORTS/shard-I.{json,xml,md} and the shard's own results store
# shard-I.sqlite, then exits with the harness's exit code (0 all passed, 1 some case
# failed, 2 bad usage, 3 the harness broke).  The outputs are left in place whatever the
# exit code, for the artifact upload and `harness report --merge`.
#
# Environment (all optional):
#   HARNESS_DEVICES   devices of this host, one worker each (default npu:0-7; cuda:0-7 on GPUs)
#   HARNESS_REPORTS   output directory (default reports)
#   HARNESS_VENV      virtualenv to create or reuse (default .venv)
#   HARNESS_EXTRAS    pip extras of the harness (default npu: torch-npu; cuda: triton)
#   HARNESS_RUN_ARGS  more `harness run` arguments, split on spaces (e.g. "--tier all"; to
#                     balance by time, "--shard-durations FILE" with the same FILE on every
#                     shard: the shard's own store is never read for the split)
#   CANN_SET_ENV      CANN's environment script (default
#                     /usr/local/Ascend/ascend-toolkit/set_env.sh), sourced when present
#   PYTHON            interpreter for the virtualenv (default python3)
set -euo pipefail

shard="${1:-}"
if [[ ! "$shard" =~ ^[0-9]+/[0-9]+$ ]]; then
  echo "ci/run-shard.sh: shard '$shard': expected I/N, e.g. 3/8 (usage: ci/run-shard.sh I/N [CASE PATHS...])" >&2
  exit 2
fi
shift
index="${shard%%/*}"
if [ "$#" -gt 0 ]; then
  paths=("$@")
else
  paths=(cases)
fi

cd "$(dirname "$0")/.."
devices="${HARNESS_DEVICES:-npu:0-7}"
reports="${HARNESS_REPORTS:-reports}"
venv="${HARNESS_VENV:-.venv}"
extras="${HARNESS_EXTRAS:-npu}"
cann_set_env="${CANN_SET_ENV:-/usr/local/Ascend/ascend-toolkit/set_env.sh}"
read -r -a run_args <<< "${HARNESS_RUN_ARGS:-}"

# CANN's script reads variables it may not find set: source it without -u.
if [ -f "$cann_set_env" ]; then
  set +u
  # shellcheck disable=SC1090
  source "$cann_set_env"
  set -u
fi

# --system-site-packages: a host image often carries the torch + torch-npu pair that matches
# its CANN; pip then keeps them (the `npu` extra is already satisfied) instead of pulling
# another torch.  On a bare host the extra installs torch-npu, which brings its torch.
if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv --system-site-packages "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$extras]"

mkdir -p "$reports"
rc=0
"$venv/bin/harness" run "${paths[@]}" --devices "$devices" --shard "$shard" \
  --store "$reports/shard-$index.sqlite" \
  --json "$reports/shard-$index.json" \
  --junit "$reports/shard-$index.xml" \
  --markdown "$reports/shard-$index.md" \
  ${run_args[@]+"${run_args[@]}"} || rc=$?

echo "ci/run-shard.sh: shard $shard exited $rc; outputs:"
ls -l "$reports"/shard-"$index".* 2>/dev/null || echo "  (none: see the log above)"
exit "$rc"
