#!/usr/bin/env bash
# tests/servers/run_hf_probe.sh OUT_DIR [BUILD] — on a GPU host with torch and transformers:
# starts tests/servers/hf_server.py (a random-weight DeepSeek-V2-shaped model batched with left
# padding) on a free 127.0.0.1 port, points `invar probe` at it with cases/hf-probe.ini, writes
# the report to OUT_DIR, stops the server. probe's exit code is the script's: 1 (caught as
# batch-variant) is the expected outcome; the server's log is OUT_DIR/hf_server.log.
set -u
OUT=${1:?usage: tests/servers/run_hf_probe.sh OUT_DIR [BUILD]}
BUILD=${2:-build}
mkdir -p "$OUT"
rm -f "$OUT/hf_server.port"
python3 tests/servers/hf_server.py --port-file "$OUT/hf_server.port" >"$OUT/hf_server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 600); do  # model build: at most 5 minutes
    [ -s "$OUT/hf_server.port" ] && break
    kill -0 $pid 2>/dev/null || { cat "$OUT/hf_server.log"; echo "hf_server.py exited"; exit 2; }
    sleep 0.5
done
[ -s "$OUT/hf_server.port" ] || { cat "$OUT/hf_server.log"; echo "hf_server.py did not start"; exit 2; }
cat "$OUT/hf_server.log"
"$BUILD/invar" probe --url "http://127.0.0.1:$(cat "$OUT/hf_server.port")" \
    --case cases/hf-probe.ini --step-ms 20 --out "$OUT"
rc=$?
echo "invar probe exit $rc (1: the server was caught as batch-variant, as expected)"
exit $rc
