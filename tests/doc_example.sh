#!/usr/bin/env bash
# tests/doc_example.sh [BUILD] — kernels/README.md's "Adding a kernel" example, as written: its
# fenced blocks are applied to a scratch copy of the tree, which must then build and pass.
#
# Each block the example means to be applied follows a marker line of the README:
#   <!-- doc_example: new PATH -->              the block is the whole new file PATH
#   <!-- doc_example: declare PATH -->          the block goes in PATH just before its #endif
#   <!-- doc_example: replace PATH LINE... -->  the block (one line) replaces PATH's one line
#                                               that reads LINE (leading blanks aside)
# The CPU kernel then goes through `invar kernels --device cpu --set invariant --op rmsnorm`,
# tests/test_inv_cpu_rmsnorm and a stride check of our own: the checker and the unit test never
# pass a stride of 0, which ops.h reads as dense, so a kernel ignoring that rule would pass
# them. The CUDA kernel is compiled with nvcc (where nvcc is) but not run: running it would
# take a whole CUDA build of the copy.
#
# BUILD (default build): a CPU-only build of this tree (no BUILD/kernels/cuda) seeds the
# copy's build, so only what the example touches is rebuilt; otherwise the copy is built
# CPU-only from scratch. Exit 0 when everything passed, 1 otherwise, 2 on a bad README.
set -u
BUILD=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
readme="$root/kernels/README.md"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/invar-doc-example.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "doc_example: $*"; exit 1; }

# The tree as it stands, mtimes kept so that a seeded build rebuilds only what the example
# changes (tree_copy: a copy without .git, such as the mutation suite's, taken whole).
# shellcheck source=tests/mutants/tree.sh
. "$root/tests/mutants/tree.sh"  # tree_copy
tree_copy "$root" "$tmp" || fail "cannot copy the tree"

# Apply the marked blocks. The CPU and CUDA halves are told apart by their paths.
python3 - "$readme" "$tmp" <<'EOF' || exit 2
import re, sys
readme, tree = sys.argv[1], sys.argv[2]
lines = open(readme, encoding="utf-8").read().split("\n")
marker = re.compile(r"^\s*<!-- doc_example: (new|declare|replace) (\S+)(?: (.*?))? -->\s*$")
applied = 0
i = 0
while i < len(lines):
    m = marker.match(lines[i])
    i += 1
    if not m:
        continue
    kind, path, arg = m.group(1), m.group(2), m.group(3)
    while i < len(lines) and not lines[i].strip():
        i += 1
    fence = re.match(r"^(\s*)```", lines[i]) if i < len(lines) else None
    if not fence:
        sys.exit(f"{readme}:{i}: a doc_example marker not followed by a fenced block")
    indent = len(fence.group(1))
    i += 1
    block = []
    while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
        block.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
        i += 1
    i += 1
    target = f"{tree}/{path}"
    text = "\n".join(block) + "\n"
    if kind == "new":
        open(target, "w", encoding="utf-8").write(text)
    elif kind == "declare":
        old = open(target, encoding="utf-8").read()
        at = old.rfind("#endif")
        if at < 0:
            sys.exit(f"{path}: no #endif to declare before")
        open(target, "w", encoding="utf-8").write(old[:at] + text + "\n" + old[at:])
    else:
        old = open(target, encoding="utf-8").read().split("\n")
        hits = [k for k, l in enumerate(old) if l.strip() == arg]
        if len(hits) != 1 or len(block) != 1:
            sys.exit(f"{readme}: replace {path}: '{arg}' found {len(hits)} times (must be once), "
                     f"block of {len(block)} lines (must be one)")
        old[hits[0]] = block[0]
        open(target, "w", encoding="utf-8").write("\n".join(old))
    print(f"doc_example: {kind} {path}")
    applied += 1
if applied != 6:
    sys.exit(f"{readme}: {applied} doc_example blocks, expected 6 (3 CPU, 3 CUDA)")
EOF

# A stride check the README's kernel must pass: ld = 0 reads as dense (ops.h), a padded row's
# gap stays untouched, and the set's rmsnorm is the example's.
cat >"$tmp/tests/test_doc_example_stride.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include "../kernels/cpu/inv_cpu.h"
#include "../kernels/cpu/inv_cpu_ops.h"

enum { M = 5, D = 37, LD = D + 3 };

int main(void) {
    static bf16 x_dense[M * D], x_padded[M * LD], w[D], out_dense[M * D], out_padded[M * LD];
    for (int i = 0; i < M * D; i++) x_dense[i] = (bf16)(0x3c00 + (i * 97) % 0x700);
    for (int i = 0; i < D; i++) w[i] = (bf16)(0x3f00 + (i * 13) % 0x100);
    for (int m = 0; m < M; m++) memcpy(x_padded + m * LD, x_dense + m * D, sizeof(bf16) * D);
    memset(out_padded, 0xFF, sizeof out_padded);
    ops_set *ops = inv_cpu_create(2);
    if (ops->rmsnorm != inv_cpu_rmsnorm_lanes8) {
        puts("the invariant CPU set's rmsnorm is not inv_cpu_rmsnorm_lanes8");
        return 1;
    }
    ops->rmsnorm(ops, out_dense, 0, x_dense, 0, w, M, D, 1e-6f);
    ops->rmsnorm(ops, out_padded, LD, x_padded, LD, w, M, D, 1e-6f);
    ops->destroy(ops);
    for (int m = 0; m < M; m++) {
        if (memcmp(out_dense + m * D, out_padded + m * LD, sizeof(bf16) * D) != 0) {
            printf("row %d: stride 0 (dense) and stride %d give other bits\n", m, LD);
            return 1;
        }
        for (int i = D; i < LD; i++)
            if (out_padded[m * LD + i] != 0xFFFF) {
                printf("row %d: the gap after its %d values was written\n", m, D);
                return 1;
            }
    }
    puts("stride 0 reads as dense, gaps untouched, inv_cpu_rmsnorm_lanes8 registered");
    return 0;
}
EOF

cd "$tmp" || exit 2
case $BUILD in
    /* | *..*) seed= ;;
    *) seed=$BUILD ;;
esac
if [ -n "$seed" ] && [ -f "$root/$seed/libinvar.a" ] && [ ! -d "$root/$seed/kernels/cuda" ]; then
    b=$seed
    (cd "$root" && find "$b" -path "$b/report" -prune -o \( -name '*.o' -o -name '*.d' -o -name '*.a' \) \
        -type f -print0 | tar --null -T - -cf -) | tar -xf - || fail "cannot seed the build from $b"
else
    b=build-doc
fi
jobs=$(nproc 2>/dev/null || echo 2)
# Not the calling make's flags (make check's BUILD or CUDA would override these); DEPS_PREFIX,
# which make exports when given on its command line, is passed on.
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -j"$jobs" CUDA=0 BUILD="$b" \
    ${DEPS_PREFIX:+DEPS_PREFIX="$DEPS_PREFIX"} "$b/invar" "$b/tests/test_inv_cpu_rmsnorm" \
    "$b/tests/test_doc_example_stride" >"$tmp/make.log" 2>&1 ||
    { tail -n 40 "$tmp/make.log"; fail "the CPU example does not build"; }

rc=0
"$b/invar" kernels --device cpu --set invariant --op rmsnorm --out "$tmp/report" || rc=1
"$b/tests/test_inv_cpu_rmsnorm" || rc=1
"$b/tests/test_doc_example_stride" || rc=1
[ "$rc" = 0 ] || fail "the CPU example builds but does not pass"

# The CUDA half: the new kernel and the set's table with its line, compiled for sm_90a.
nvcc=$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -z "$nvcc" ]; then
    echo "doc_example: CPU example passed; CUDA example not compiled (no nvcc)"
    exit 0
fi
cuda_home=${nvcc%/bin/nvcc}
for f in kernels/cuda/rmsnorm_warp.cu kernels/cuda/inv_cuda.cu; do
    "$nvcc" -std=c++17 -O3 -DINVAR_CUDA -I"$cuda_home/include" ${DEPS_PREFIX:+-I"$DEPS_PREFIX/usr/include"} \
        -gencode arch=compute_90a,code=sm_90a \
        -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings -c "$f" -o "$tmp/$(basename "$f").o" ||
        fail "the CUDA example: $f does not compile"
done
echo "doc_example: CPU example passed; CUDA example compiled (nvcc, sm_90a; not run)"
