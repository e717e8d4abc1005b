"""python3 -m invar_bridge kernels --op OP --fn MODULE:FUNCTION [--device cpu|cuda] [--not-invariant]
                          [--lse-base e|2] [--quick] [--out DIR] [-- INVAR_KERNELS_ARGS...]
   python3 -m invar_bridge run --case FILE --op OP --fn MODULE:FUNCTION [--device cpu|cuda]
                          [--not-invariant] [--lse-base e|2] [--out DIR] [-- INVAR_RUN_ARGS...]

kernels: invar's kernel checker on the function as op OP (the same shapes, probes, float64
oracle and kernels.csv as `invar kernels`). run: the engine with op OP taken from the function.
Exit codes as invar's: 0 every expectation held, 1 one failed, 2 bad usage."""
import argparse
import math
import sys

from . import CHECK_OPS, OPS, check, load_function, run


def main(argv):
    rest = []
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="python3 -m invar_bridge", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=["kernels", "run"])
    p.add_argument("--op", required=True, choices=OPS + tuple(CHECK_OPS),
                   help="the ops.h op the function is (kernels: gemm_f32, a gemm function through its fp32 store)")
    p.add_argument("--fn", required=True, metavar="MODULE:FUNCTION", help="the function, importable")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--not-invariant", action="store_true",
                   help="the function does not claim batch invariance: it must be caught varying")
    p.add_argument("--lse-base", choices=["e", "2"],
                   help="mha_prefill: the base of the log-sum-exp the function returns (default: e, "
                        "or the function's invar_lse_base)")
    p.add_argument("--quick", action="store_true", help="kernels: fewer shapes and batch sizes")
    p.add_argument("--case", metavar="FILE", help="run: the case file")
    p.add_argument("--out", metavar="DIR", help="where the reports go (default: a new temporary folder)")
    a = p.parse_args(argv)
    if a.command == "run" and not a.case:
        p.error("run: --case FILE is required")
    if a.command == "run" and a.op in CHECK_OPS:
        p.error(f"run: --op {a.op} is a kernel-checker section; the engine's op is --op {CHECK_OPS[a.op]}")
    try:
        fn = load_function(a.fn)
    except (ImportError, AttributeError, ValueError) as e:
        print(f"invar_bridge: error: --fn {a.fn}: {e}", file=sys.stderr)
        return 2
    if a.lse_base and a.op != "mha_prefill":
        p.error("--lse-base: only with --op mha_prefill")
    base = {"e": math.e, "2": 2, None: None}[a.lse_base]
    if a.command == "kernels":
        rc, rows = check(a.op, fn, device=a.device, claims_invariant=not a.not_invariant, quick=a.quick,
                         out=a.out, args=rest, lse_base=base)
        return rc
    return run(a.case, {a.op: fn}, device=a.device, claims_invariant=not a.not_invariant, out=a.out, args=rest,
               lse_base=base)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
