#!/usr/bin/env bash
# Move the pins: rewrite ci/constraints-cpu.txt from a fresh .venv-latest (today's releases).
# Run ci/test-latest.sh first; commit the new file with the suite green against it.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .venv-latest
bash ci/setup-cpu.sh --latest
{
  sed -n '/^#/p' ci/constraints-cpu.txt
  .venv-latest/bin/pip freeze --exclude-editable --disable-pip-version-check | sed 's/^torch==\(.*\)+cpu$/torch==\1/'
} > ci/constraints-cpu.txt.new
mv ci/constraints-cpu.txt.new ci/constraints-cpu.txt
echo "ci/constraints-cpu.txt: $(grep -vc '^#' ci/constraints-cpu.txt) packages pinned"
