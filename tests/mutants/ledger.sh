#!/usr/bin/env bash
# tests/mutants/ledger.sh [STATE_DIR [LEDGER]] — tests/mutants/LEDGER.md, the mutation ledger:
# one row a mutant of tests/mutants/*.patch, written from run.sh's state files
# (build-mutants/state/NAME) and merged with the ledger already there. run.sh calls it after
# every run; it can be run alone to rewrite the ledger from a state folder carried from a GPU host.
#
# A row's verdict comes from its state file when that judged the patch as it is now (the state's
# first line is the patch's sha1). Otherwise the ledger's old row is kept if it names the same
# patch (its `patch` column) and judged it: a CPU-only run keeps the CUDA verdicts a GPU host
# wrote. Anything else is "not run here", saying why in the `judged` column.
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
state=${1:-$root/build-mutants/state}
ledger=${2:-$here/LEDGER.md}
# shellcheck source=tests/mutants/header.sh
. "$here/header.sh"  # header

old_row() {  # old_row NAME: the old ledger's row for NAME, if any
    [ -f "$ledger" ] || return 0
    grep -F -m1 "| \`$1\` |" "$ledger"
}

cell() {  # cell ROW N: the Nth cell of a Markdown table row, trimmed
    printf '%s\n' "$1" | awk -F' [|] ' -v n="$2" '{ sub(/^[|] /, ""); sub(/ [|]$/, ""); print $n }'
}

rows=$(mktemp) || exit 2
trap 'rm -f "$rows" "$ledger.tmp"' EXIT
for p in "$here"/*.patch; do
    name=$(basename "$p" .patch)
    sum=$(sha1sum "$p" | cut -c1-40)
    short=${sum:0:10}
    class=$(header "$p" class)
    device=$(header "$p" device)
    device=${device:-cpu}
    st="$state/$name"
    verdict="" by="-" secs="-" judged=""
    if [ -f "$st" ] && [ "$(sed -n 1p "$st")" = "$sum" ]; then
        verdict=$(sed -n 2p "$st")
        line=$(sed -n 3p "$st")
        secs=$(sed -n 4p "$st")
        judged=$(sed -n 5p "$st")
        [ -n "$secs" ] || secs="-"
        [ -n "$judged" ] || judged="a run before seconds were kept"
        case "$verdict" in
        caught) by=$(printf '%s\n' "$line" | sed 's/^[^ ]*: caught by //; s/: .*//') ;;
        skipped) verdict="" ;;
        esac
    fi
    if [ -z "$verdict" ]; then
        old=$(old_row "$name")
        if [ -n "$old" ] && [ "$(cell "$old" 8)" = "\`$short\`" ] &&
            [ "$(cell "$old" 4)" != "not run here" ]; then
            printf '%s\n' "$old" >>"$rows"
            continue
        fi
    fi
    # An argued-out mutant is equivalent by its header: nothing to run.
    if [ -z "$verdict" ] && [ -n "$(header "$p" equivalent)" ]; then
        verdict=equivalent judged="argued out in the patch's header"
    fi
    if [ -z "$verdict" ]; then
        verdict="not run here"
        if [ -f "$st" ] && [ "$(sed -n 1p "$st")" = "$sum" ]; then
            judged="no CUDA device: patched and compiled with nvcc, not run"
        else
            judged="not judged in this ledger's run"
        fi
    fi
    printf '| `%s` | %s | %s | %s | %s | %s | %s | `%s` |\n' "$name" "$class" "$device" \
        "$verdict" "$by" "$secs" "$judged" "$short" >>"$rows"
done

count() { awk -F' [|] ' -v d="$1" -v v="$2" '$3 == d && $4 ~ "^" v { n++ } END { print n + 0 }' "$rows"; }
{
    echo "# Mutation ledger"
    echo
    echo "Written by \`make mutants\` (tests/mutants/ledger.sh from build-mutants/state, merged with"
    echo "this file's own rows): do not edit by hand. One row a patch of tests/mutants/; \`caught by\` is"
    echo "the first check that failed (run.sh tries the patch's own checks, then the ladder of"
    echo "\`make check\`'s suites), \`s\` the seconds the mutant took, \`judged\` the host and date of"
    echo "the run (or where the verdict came from), \`patch\` the first 10 hex digits of the patch's"
    echo "sha1: a row is kept only while the patch is the one it judged. How the suite works:"
    echo "tests/README.md."
    echo
    for d in cpu cuda; do
        echo "- $d: $(count "$d" caught) caught, $(count "$d" survived) survived," \
             "$(count "$d" equivalent) equivalent (argued out, not counted)," \
             "$(count "$d" invalid) invalid, $(count "$d" "not run here") not run here"
    done
    echo
    echo "| mutant | class | device | verdict | caught by | s | judged | patch |"
    echo "| --- | --- | --- | --- | --- | ---: | --- | --- |"
    cat "$rows"
} >"$ledger.tmp" && mv "$ledger.tmp" "$ledger"
echo "mutants: wrote $ledger"
