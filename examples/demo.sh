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

# A local Hub on a free port, with a throwaway token known only to this run.
TOKEN="demo-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
rm -rf "$OUT/hub" "$OUT/hf-home"
PACKAGER_HUB_TOKEN="$TOKEN" $PACKAGER hub serve --root "$OUT/hub" --port 0 > "$OUT/hub.log" 2>&1 &
HUB_PID=$!
trap 'kill $HUB_PID 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q "serving http" "$OUT/hub.log" 2>/dev/null && break; sleep 0.1; done
URL=$(sed -n 's/.*serving \(http[^ ]*\).*/\1/p' "$OUT/hub.log")
[ -n "$URL" ] || { cat "$OUT/hub.log"; exit 1; }
echo "local Hub at $URL"

export HF_TOKEN="$TOKEN" HF_HOME="$OUT/hf-home" HF_ENDPOINT="$URL"
$PACKAGER release examples/release.toml --bundle "$OUT/bundle"
cd "$OUT/bundle" && xxhsum -c --quiet checksums.xxh128 && cd - > /dev/null
REPO=$(sed -n 's/^repo_id = "\(.*\)"/\1/p' examples/release.toml)
$PACKAGER verify-remote "$REPO@v3"
echo "demo: released and verified $REPO@v3 on $URL (bundle in $OUT/bundle)"
