# Sourced by the demos (needs PACKAGER and OUT): a local Hub on a free port with a throwaway token known only to
# this run, stopped when the demo ends; HF_TOKEN, HF_HOME and HF_ENDPOINT point packager at it.
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
