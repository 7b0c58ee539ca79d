#!/usr/bin/env bash
# The whole job on built-in defaults: a tiny Qwen3 checkpoint -> MNN bundle -> validated, carded,
# checksummed -> released to a local Hub this script starts and stops -> verified by downloading it back.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${DEMO:-demo-output}
PACKAGER="$PY -m packager.cli"

$PY -m tests.models "$OUT/tiny-qwen3"
$PACKAGER convert "$OUT/tiny-qwen3" --out "$OUT/bundle" --force
$PACKAGER validate "$OUT/bundle" --strict

source "$(dirname "$0")/localhub.sh"
$PACKAGER release examples/release.toml --bundle "$OUT/bundle"
cd "$OUT/bundle" && xxhsum -c --quiet checksums.xxh128 && cd - > /dev/null
REPO=$(sed -n 's/^repo_id = "\(.*\)"/\1/p' examples/release.toml)
$PACKAGER verify-remote "$REPO@v3"
echo "demo: released and verified $REPO@v3 on $URL (bundle in $OUT/bundle)"
