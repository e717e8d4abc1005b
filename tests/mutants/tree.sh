# shellcheck shell=bash
# tests/mutants/tree.sh — what the scripts that plant mutants share besides headers (header.sh):
# the scratch copy of the tree and the choice of CPU kernel bugs. Sourced by run.sh,
# tests/ci_catches_kernel_mutants.sh and tests/localize_mutants.sh, so the three plant a patch
# in the same files and judge the same set of kernel mutants.

# tree_copy ROOT DEST: ROOT's own files (tracked and untracked, not ignored) into DEST, build
# folders left out; a tree without its .git (a GPU host's copy) is taken whole.
tree_copy() {
    if git -C "$1" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        (cd "$1" && git ls-files -z --cached --others --exclude-standard | grep -zv '^build' |
            tar --null -T - -cf -)
    else
        (cd "$1" && tar --exclude='./build*' --exclude='./.deps' -cf - .)
    fi | tar -xf - -C "$2"
}

# cpu_kernel_mutant PATCH: true for a CPU kernel bug that is not argued equivalent.
cpu_kernel_mutant() {
    [ "$(header "$1" class)" = kernel ] && [ "$(header "$1" device)" = cpu ] &&
        [ -z "$(header "$1" equivalent)" ]
}
