#!/usr/bin/env bash
# tests/mutants/check_apply.sh — what `make check` runs of the mutation suite: every patch must
# still apply to the tree (git apply --check; nothing is built), so the suite cannot rot as the
# code moves, and carry a well-formed header (header.sh). Run from the repository root.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/mutants/header.sh
. "$here/header.sh"  # header_problem
n=0 bad=0
for p in "$here"/*.patch; do
    [ -f "$p" ] || continue
    n=$((n + 1))
    if ! why=$(git apply --check "$p" 2>&1); then
        bad=$((bad + 1))
        echo "mutant $(basename "$p" .patch) no longer applies: ${why%%$'\n'*}"
        echo "  (rebase it on the code it mutates, or delete it if that code is gone)"
    elif problem=$(header_problem "$p") && [ -n "$problem" ]; then
        bad=$((bad + 1))
        echo "mutant $(basename "$p" .patch): malformed header: $problem"
    fi
done
echo "$n mutation patches, $bad that do not apply or have a malformed header"
[ "$n" -gt 0 ] && [ "$bad" = 0 ]
