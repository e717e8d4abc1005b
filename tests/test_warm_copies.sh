#!/usr/bin/env bash
# tests/test_warm_copies.sh BUILD — accuracy, not invariance, on cases/warm-copies.ini: its
# control (mla-split with prefix caching forced on) differs from the baselines in the warm
# copies, served over cached keys by a split prefill, mla-split's reason to drop prefix caching.
# That is an order change: it moves logprobs by rounding and keeps every chosen token. Keys read
# wrong (a cached context left out of the gather) change the tokens. Tolerance: 0.1 in
# |Δ logprob| on the tiny model, whose order changes there move it by about 0.03.
set -u
BUILD=${1:-build}
out="$BUILD/report/warm-copies-accuracy"
rm -rf "$out"
"$BUILD/invar" run --case cases/warm-copies.ini --out "$out" -q >"$out.log" 2>&1 ||
    { cat "$out.log"; echo "FAIL: cases/warm-copies.ini did not pass"; exit 1; }
awk -F'","' -v config=cpu/invariant '
    NR > 1 && substr($1, 2) == config {
        rows++
        if ($5 != "logprob" || $10 + 0 > 0.1) { bad++; print "not an order change: " $0 }
    }
    END {
        printf "%s: %d divergence rows of the warm copies, %d beyond rounding (|d logprob| > 0.1 or another token)\n", config, rows, bad
        exit !(rows > 0 && bad == 0)
    }' "$out/divergence.csv"
