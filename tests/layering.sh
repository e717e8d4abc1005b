#!/usr/bin/env bash
# tests/layering.sh [--self-test | BUILD] — the include directions between the top-level rooms, read
# from the #include "..." lines of every tracked .c, .h, .cu and .cuh file: a room may include
# itself and the rooms below it, never one above, so no change can make a lower room depend on
# a higher one unseen. Run from the repository root.
#
#   harness -> sets, engine, reports, kernels, common (the kernel sets only through sets/)
#   sets -> adversarial -> reference -> kernels -> common  (each: anything to its right)
#   engine -> kernels, common;  reports -> common;  common -> nothing;  tests: unrestricted
#
# Prints "FILE:LINE: ROOM may not include OTHER (path)" for each include that runs the wrong
# way. --self-test: checks that a planted include of each wrong kind is caught and a right one
# is not (the negative control of the check itself). BUILD (as the mutation suite passes it) is
# ignored.
set -u

allowed() {  # allowed ROOM: the rooms ROOM may include (itself among them)
    case $1 in
        harness) echo "harness sets engine reports kernels common" ;;
        sets) echo "sets adversarial reference kernels common" ;;
        adversarial) echo "adversarial reference kernels common" ;;
        reference) echo "reference kernels common" ;;
        engine) echo "engine kernels common" ;;
        kernels) echo "kernels common" ;;
        reports) echo "reports common" ;;
        common) echo "common" ;;
    esac
}

# check FILE...: reads each file's #include "..." lines, resolves each path against the
# including file's folder, and prints the violations; exit 1 when there is one.
check() {
    local rules="" r
    for r in harness sets adversarial reference engine kernels reports common; do
        rules="$rules$r=$(allowed "$r");"
    done
    awk -v rules="$rules" '
        BEGIN {
            n = split(rules, rs, ";")
            for (i = 1; i <= n; i++) if (rs[i] != "") {
                split(rs[i], kv, "="); room[kv[1]] = 1
                m = split(kv[2], dst, " ")
                for (j = 1; j <= m; j++) ok[kv[1], dst[j]] = 1
            }
        }
        # dir/path with "." and ".." taken away; "" when it leaves the repository
        function resolve(dir, path,    parts, n, i, out, k, s) {
            n = split(dir "/" path, parts, "/"); k = 0
            for (i = 1; i <= n; i++) {
                if (parts[i] == "" || parts[i] == ".") continue
                if (parts[i] == "..") { if (k == 0) return ""; k--; continue }
                out[++k] = parts[i]
            }
            s = ""
            for (i = 1; i <= k; i++) s = s (i > 1 ? "/" : "") out[i]
            return s
        }
        FNR == 1 {
            from = FILENAME; sub(/\/.*/, "", from)
            dir = FILENAME; if (!sub(/\/[^\/]*$/, "", dir)) dir = "."
        }
        /^[ \t]*#[ \t]*include[ \t]*"/ {
            if (!(from in room)) next  # tests, files at the root: unrestricted
            path = $0; sub(/^[^"]*"/, "", path); sub(/".*/, "", path)
            target = resolve(dir, path)
            if (target !~ /\//) next   # a file at the root, or outside the repository
            to = target; sub(/\/.*/, "", to)
            if (!(to in room) || ok[from, to]) next
            printf "%s:%d: %s may not include %s (%s)\n", FILENAME, FNR, from, to, path
            bad = 1
        }
        END { exit bad }' "$@"
}

self_test() {
    local tmp out fails=0
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    mkdir -p "$tmp/common" "$tmp/kernels/cpu" "$tmp/reports" "$tmp/engine" "$tmp/harness/run" "$tmp/tests" \
             "$tmp/sets" "$tmp/adversarial/cpu" "$tmp/reference/cpu"
    printf '#include "../reports/x.h"\n' >"$tmp/common/up.c"
    printf '#include <stdio.h>\n#include "../../engine/e.h"  // up\n' >"$tmp/kernels/cpu/up.c"
    printf '#include "../../sets/registry.h"\n' >"$tmp/reference/cpu/up.c"
    printf '#include "../engine/e.h"\n' >"$tmp/reports/side.c"
    printf '#include "../../kernels/ops.h"\n#include "../../common/hash.h"\n#include "../cli_args.h"\n' \
        >"$tmp/harness/run/down.c"
    printf '#include "../harness/run/x.h"\n' >"$tmp/tests/free.c"
    printf '#include "../../reference/cpu/ref_cpu.h"\n' >"$tmp/harness/run/skip.c"
    printf '#include "../reference/cpu/r.h"\n#include "../../kernels/ops.h"\n' >"$tmp/adversarial/cpu/down.c"
    out=$(cd "$tmp" && check common/up.c kernels/cpu/up.c reference/cpu/up.c reports/side.c \
                            harness/run/down.c tests/free.c adversarial/cpu/down.c harness/run/skip.c)
    local want=(
        "common/up.c:1: common may not include reports (../reports/x.h)"
        "kernels/cpu/up.c:2: kernels may not include engine (../../engine/e.h)"
        "reference/cpu/up.c:1: reference may not include sets (../../sets/registry.h)"
        "reports/side.c:1: reports may not include engine (../engine/e.h)"
        "harness/run/skip.c:1: harness may not include reference (../../reference/cpu/ref_cpu.h)"
    )
    for w in "${want[@]}"; do
        grep -qxF "$w" <<<"$out" || { echo "self-test: not caught: $w"; fails=1; }
    done
    if [ "$(grep -c . <<<"$out")" != "${#want[@]}" ]; then
        echo "self-test: expected exactly ${#want[@]} violations, got:"
        echo "$out"
        fails=1
    fi
    [ "$fails" = 0 ] && echo "layering self-test: ${#want[@]} planted wrong-way includes caught, right-way ones passed"
    return $fails
}

if [ "${1:-}" = --self-test ]; then
    self_test
    exit
fi
# The tracked files; outside a git checkout (the mutation suite's scratch copies), every one.
if ! mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null) || [ "${#files[@]}" = 0 ]; then
    mapfile -t files < <(find . -path './build*' -prune -o -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \
                             -o -name '*.cuh' \) -print | sed 's|^\./||' | sort)
fi
if check "${files[@]}"; then
    echo "layering: ${#files[@]} files, every include runs down the rooms"
else
    echo "layering: includes that run up the rooms (tests/layering.sh says the order)"
    exit 1
fi
