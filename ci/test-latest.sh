#!/usr/bin/env bash
# The suite against the latest releases of every dependency (torch stays the pinned CPU build):
# how we learn that an upstream release breaks us, without CI being blocked by it. Builds
# .venv-latest (ci/setup-cpu.sh --latest), prints what it resolved against the pins, runs the
# README's test command there. A failure here and a pass in .ci/run: an upstream change to
# adapt to, then `bash ci/lock-cpu.sh` to move the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup-cpu.sh --latest
echo "resolved today, against ci/constraints-cpu.txt:"
diff <(grep -v '^#' ci/constraints-cpu.txt | sort -f) \
     <(.venv-latest/bin/pip freeze --exclude-editable --disable-pip-version-check | sed 's/+cpu$//' | sort -f) \
  | grep '^[<>]' || echo "  (the same versions)"
exec .venv-latest/bin/python -m pytest tests -n 2 -q --dist worksteal "$@"
