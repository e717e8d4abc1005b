# tests/servers/fixture.sh — sourced by the scripts that start servers on 127.0.0.1
# (test_serve.sh, test_probe.sh, test_serve_load.sh): the report directory, every server started
# killed on exit, and reading the port a server picked.
#   fixture_start NAME    OUT=$BUILD/report/NAME emptied; INVAR=$BUILD/invar (BUILD set first)
#   pids+=(PID)           a server to kill on exit
#   wait_port_file FILE PID   the port once the server wrote FILE (at most 60 s)
#   fail MESSAGE          prints FAIL: MESSAGE, exits 1

fixture_start() {
    INVAR="$BUILD/invar"
    OUT="$BUILD/report/$1"
    rm -rf "$OUT"
    mkdir -p "$OUT"
    pids=()
    trap fixture_cleanup EXIT
}

fixture_cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
}

fail() { echo "FAIL: $*"; exit 1; }

wait_port_file() {
    local i
    for i in $(seq 600); do
        [ -s "$1" ] && { cat "$1"; return 0; }
        kill -0 "$2" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
