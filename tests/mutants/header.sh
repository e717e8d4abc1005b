# tests/mutants/header.sh — a mutation patch's leading '# key: value' lines, read and checked;
# sourced by run.sh (which judges the mutants) and check_apply.sh (make check: they must apply
# and their headers must be well formed, so a typo cannot turn into a false catch).

header() {  # header PATCH KEY: the value of '# KEY: ...' with its continuation lines
    awk -v key="$2" '
        /^diff --git/ { exit }
        $0 ~ "^# " key ": " { sub("^# " key ": ", ""); v = $0; on = 1; next }
        on && /^#   / { sub(/^#   /, ""); v = v " " $0; next }
        { on = 0 }
        END { print v }' "$1"
}

# header_problem PATCH: prints what is wrong with its header (nothing when it is well formed).
# checks: space-separated KIND:NAME words, kernels:OP/SET for a set other than the invariant
# one (a stray comma would make `invar kernels --op gemm,`
# exit 2 with a usage message, which the runner would count as a catch).
header_problem() {
    local class device c
    class=$(header "$1" class)
    device=$(header "$1" device)
    case "$class" in kernel | engine | comparator | verdict | runner | report) ;;
    *) echo "class '$class' is not one of kernel, engine, comparator, verdict, runner, report"; return ;;
    esac
    case "${device:-cpu}" in cpu | cuda) ;; *) echo "device '$device' is not cpu or cuda"; return ;; esac
    for c in $(header "$1" checks); do
        [[ "$c" =~ ^(unit|units|kernels|kernels-exhaustive|case|script):[A-Za-z0-9_.-]+$ ]] ||
            [[ "$c" =~ ^kernels(-exhaustive)?:[A-Za-z0-9_.-]+/(invariant|reference|adversarial)$ ]] ||
            { echo "check '$c' is not KIND:NAME (unit, units, kernels, kernels-exhaustive, case, script) or kernels:OP/SET"; return; }
    done
}
