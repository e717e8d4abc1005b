#!/usr/bin/env bash
# tests/test_serve_load.sh BUILD — invar serve's resources and lifetime under a bounded load, on
# 127.0.0.1 only, ending by itself in well under a minute (tests/servers/load_client.py drives
# it; each check is one of its commands):
#   identity    a request alone and the same request among 16 concurrent others: the same bits;
#   abandon     20 requests of 400 tokens whose clients leave: none runs or waits a second
#               later, and a 1-token request is served within 1 s;
#   stream      stream: true answers token by token (the first event while the request runs),
#               with the non-streamed bits; a client leaving mid-stream ends its request;
#   busy        past --max-queue requests waiting or running, 429 with Retry-After, the rest
#               served;
#   uploads     many stalled large uploads: the server's RSS stays within 2x idle and a small
#               request is still served;
#   slow        slow connections held open (sized from the open-file limit): a new client is
#               served within 1 s; again past --max-connections, and again with the server
#               out of descriptors (ulimit -n 128): the slow connection idle longest makes room;
#   drain       SIGTERM during a long request: the request gets its whole answer, the server
#               exits 0 and takes no new connection.
set -u
BUILD=${1:-build}
# shellcheck source=tests/servers/fixture.sh
. "$(dirname "$0")/servers/fixture.sh"  # fixture_start, pids, wait_port_file, fail
fixture_start serve-load

start_serve() {  # start_serve NAME ARGS...: invar serve --model tiny on a free port; PORT, SERVE_PID
    local name=$1 i  # NOFILE=N: the server's open-file limit
    shift
    rm -f "$OUT/port-$name"
    (if [ -n "${NOFILE:-}" ]; then ulimit -n "$NOFILE" || exit 1; fi
     exec "$INVAR" serve --model tiny --kernel-set invariant --port 0 --port-file "$OUT/port-$name" \
        --threads 2 --seed 5 "$@") >"$OUT/serve-$name.log" 2>&1 &
    SERVE_PID=$!
    pids+=("$SERVE_PID")
    for i in $(seq 600); do
        [ -s "$OUT/port-$name" ] && { PORT=$(cat "$OUT/port-$name"); return 0; }
        kill -0 "$SERVE_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$OUT/serve-$name.log"
    fail "invar serve ($name) did not start"
}

client() {  # client COMMAND ARGS...: tests/servers/load_client.py against PORT
    python3 tests/servers/load_client.py --port "$PORT" --pid "$SERVE_PID" "$@" ||
        fail "load_client.py $1: the check did not hold (its output above)"
}

t0=$(date +%s)
start_serve main --max-num-seqs 8 --max-upload-mb 4 --batch-window-ms 5
client identity
client abandon
client stream
client uploads
client slow
kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null

start_serve full --max-connections 32
client slow
kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null
NOFILE=128 start_serve fds --connection-timeout 30
client slow
kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null

start_serve busy --max-num-seqs 1 --max-queue 2
client busy
kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null

start_serve drain --max-num-seqs 4
client drain
wait "$SERVE_PID"
rc=$?
[ "$rc" = 0 ] || { cat "$OUT/serve-drain.log"; fail "invar serve after SIGTERM: exit $rc, expected 0"; }
echo "serve under load: all checks held in $(($(date +%s) - t0)) s"
