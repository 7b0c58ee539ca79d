#!/usr/bin/env bash
# A release matrix end to end: the demo's tiny Qwen3 checkpoint as the 2 x 2 matrix of examples/matrix.toml,
# released to a local Hub this script starts and stops with two jobs at a time, the run killed (SIGKILL) once its
# first release has landed, then run again: it finishes what is missing, redoes nothing, and shows its summary.
set -euo pipefail
PY=${PY:-.venv/bin/python}
OUT=${DEMO:-demo-output}/matrix
PACKAGER="$PY -m packager.cli"

rm -rf "$OUT" && mkdir -p "$OUT"
$PY -m tests.models "$OUT/tiny-qwen3"
cp examples/matrix.toml "$OUT/matrix.toml"
$PACKAGER check-spec "$OUT/matrix.toml"
$PACKAGER plan "$OUT/matrix.toml"

source "$(dirname "$0")/localhub.sh"

JOURNAL="$OUT/dist/matrix-matrix/journal.jsonl"
$PACKAGER release "$OUT/matrix.toml" --jobs 2 --quiet > /dev/null 2> "$OUT/first-run.log" &
RUN=$!
until grep -q '"event": "released"' "$JOURNAL" 2>/dev/null; do
  kill -0 "$RUN" 2>/dev/null || { echo "the first run ended before its first release:"; cat "$OUT/first-run.log"; exit 1; }
  sleep 0.2
done
kill -KILL "$RUN"
wait "$RUN" 2>/dev/null || true
echo "demo: killed the first run (SIGKILL) after its first release; its journal:"
sed -n 's/.*"event": "\([a-z]*\)".*"job": "\([^"]*\)".*/  \2: \1/p' "$JOURNAL"

echo "demo: the same command again"
$PACKAGER release "$OUT/matrix.toml" --jobs 2
for repo in $(sed -n 's/.*"repo_id": "\([^"]*\)".*/\1/p' "$OUT/dist/matrix-matrix/summary.json" | sort -u); do
  $PACKAGER verify-remote "$repo@v1" --quiet > /dev/null && echo "verified $repo@v1 on the Hub"
done
echo "demo: summary in $OUT/dist/matrix-matrix/summary.md and summary.json"
