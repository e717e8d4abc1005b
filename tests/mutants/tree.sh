# shellcheck shell=bash
# tests/mutants/tree.sh — what the scripts that plant mutants share besides headers (header.sh):
# the scratch copy of the tree and the choice of CPU kernel bugs. Sourced by run.sh,
# tests/ci_catches_kernel_mutants.sh and tests/localize_mutants.sh, so the three plant a patch
# in the same files and judge the same set of kernel mutants; tree_copy by tests/doc_example.sh.

# tree_copy ROOT DEST: ROOT's own files into DEST, mtimes kept (a build seeded from the tree's
# own rebuilds only what changed), build folders left out. In a git checkout whose top is ROOT:
# the tracked and untracked files git does not ignore, less tracked files deleted in the work
# tree. Elsewhere (a GPU host's copy without .git, or a scratch copy inside another repository,
# whose git would answer for the enclosing tree): every file outside build* and hidden folders.
tree_copy() {
    local top
    top=$(git -C "$1" rev-parse --show-toplevel 2>/dev/null)
    (
        cd "$1" || exit 1
        if [ -n "$top" ] && [ "$top" = "$(pwd -P)" ]; then
            git ls-files -z --cached --others --exclude-standard | grep -zv '^build'
        else
            find . -type f -not -path './build*' -not -path './.*' -print0 | sed -z 's|^\./||'
        fi | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
            tar --null -T - -cf -
    ) | tar -xf - -C "$2"
}

# cpu_kernel_mutant PATCH: true for a CPU kernel bug that is not argued equivalent.
cpu_kernel_mutant() {
    [ "$(header "$1" class)" = kernel ] && [ "$(header "$1" device)" = cpu ] &&
        [ -z "$(header "$1" equivalent)" ]
}
