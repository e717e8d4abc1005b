"""tests/third_party/table.py — the third-party kernel table (tests/gpu_third_party.sh runs it).

    python3 tests/third_party/table.py --out DIR [--device cuda|cpu] [--fake numpy] [--only NAMES]
                                       [--quick] [--budget-s N] [--jobs N] [--no-engine] [--engine-case FILE]

Each kernel of tests/third_party/kernels.py is checked by invar's kernel checker through the
Python bridge in a process of its own (a crash or a sticky CUDA error loses only that kernel's
row), then the engine runs with a third-party GEMM. DIR/third_party.csv gets one row a kernel:
the date, device, commit, torch and triton versions; the kernel, its source, the ops.h op and
the adapter; the verdict (invariant, batch-variant, error, crash, skip, not judged), the first
varying M, row and shape, or the largest M tried; the worst relative L2 error against the
float64 oracle and the tolerance. --fake numpy: numpy stand-ins on the CPU (the table's own
test in make check). Exit: 0 the table was written, 2 bad usage."""
import argparse
import concurrent.futures
import csv
import datetime
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import kernels as K  # noqa: E402

COLUMNS = ["date_utc", "device", "commit", "torch", "triton", "kind", "kernel", "source", "op", "adapter",
           "claims_invariant", "verdict", "first_vary_M", "first_vary_row", "first_vary_shape", "largest_M",
           "worst_rel_l2_err", "tol", "accurate", "seconds", "note"]


def _versions():
    out = {}
    for name in ("torch", "triton"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 — absent or broken: the table says so
            out[name] = "-"
    return out


def _device_name(device):
    if device == "cpu":
        return "cpu"
    import torch
    return torch.cuda.get_device_name(0)


def _commit():
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _tracked(fn, seen):
    """fn, recording the most rows (the first argument's first dimension) it was called with."""
    def tracked(*args, **kwargs):
        seen[0] = max(seen[0], int(args[0].shape[0]))
        return fn(*args, **kwargs)
    for attr in ("invar_lse_base",):
        if hasattr(fn, attr):
            setattr(tracked, attr, getattr(fn, attr))
    return tracked


def judge(rows, tol_default=""):
    """The verdict of one op's kernels.csv rows (the plugin's own)."""
    mine = [r for r in rows if r.get("source") == "plugin"]
    result = {"verdict": "error", "first_vary_M": "", "first_vary_row": "", "first_vary_shape": "",
              "worst_rel_l2_err": "", "tol": tol_default, "accurate": "", "note": ""}
    if not mine:
        result["note"] = "no row from the checker"
        return result
    bad = [r for r in mine if r["status"] in ("ERROR", "CRASH")]
    errs = [float(r["rel_l2_err"]) for r in mine if r.get("rel_l2_err") not in ("", None)]
    if errs:
        result["worst_rel_l2_err"] = f"{max(errs):.3e}"
    result["tol"] = mine[0].get("tol", tol_default)
    if errs and result["tol"]:
        result["accurate"] = "yes" if max(errs) <= float(result["tol"]) else "no"
    if bad:
        result["verdict"] = "crash" if bad[0]["status"] == "CRASH" else "error"
        result["note"] = f'{bad[0]["shape"]}: {bad[0]["note"]}'
        return result
    varied = [r for r in mine if r["invariant"] == "no"]
    if varied:
        r = varied[0]
        result.update(verdict="batch-variant", first_vary_M=r["first_vary_M"], first_vary_row=r["first_vary_row"],
                      first_vary_shape=r["shape"])
        vs = r.get("first_vary_vs_M")
        result["note"] = f"row {r['first_vary_row']} at M={r['first_vary_M']} differed from " + \
            ("itself alone" if vs in ("", "1") else f"the same row at M={vs}")
    else:
        result["verdict"] = "invariant"
        result["note"] = f"{len(mine)} shapes, every probe row bitwise equal"
    return result


def one_kernel(entry, device, out, quick):
    """Child: checks one kernel; returns the row's fields."""
    name, source, op, adapter, claims, load = entry
    try:
        fn = load()
    except K.Missing as e:
        return {"verdict": "skip", "note": f"SKIP: {e}"}
    except Exception as e:  # noqa: BLE001 — a kernel that cannot be loaded is the table's row
        return {"verdict": "error", "note": f"load: {type(e).__name__}: {e}".splitlines()[0][:300]}
    import invar_bridge as ib
    seen = [0]
    start = time.time()
    rc, rows = ib.check(op, _tracked(fn, seen), device=device, claims_invariant=claims, quick=quick, out=out)
    result = judge(rows)
    result["largest_M"] = str(seen[0]) if seen[0] else ""
    result["seconds"] = f"{time.time() - start:.1f}"
    result["checker_exit"] = rc
    if K.digest(source):
        result["source"] = f"{source} (sha256 {K.digest(source)})"
    return result


def one_engine(entry, device, out, case):
    name, load, claims = entry
    try:
        fn = load()
    except K.Missing as e:
        return {"verdict": "skip", "note": f"SKIP: {e}"}
    import invar_bridge as ib
    start = time.time()
    rc = ib.run(case, {"gemm": fn}, device=device, claims_invariant=claims, out=out, args=["-q"])
    result = {"verdict": "error", "note": f"invar run exit {rc}, no summary.csv", "seconds": f"{time.time() - start:.1f}"}
    path = os.path.join(out, "summary.csv")
    if os.path.exists(path):
        with open(path, newline="") as f:
            configs = list(csv.DictReader(f))
        observed = sorted({c["observed"] for c in configs})
        varied = [c for c in configs if c["observed"] == "batch-variant"]
        first = varied[0] if varied else (configs[0] if configs else None)
        result["verdict"] = "batch-variant" if varied else ("invariant" if configs else "error")
        if first:
            result["note"] = (f'{len(configs)} configs, observed {"/".join(observed)}; {first["config"]}: '
                              f'expected {first["expected"]}, observed {first["observed"]}, {first["verdict"]}, '
                              f'{first["differing_requests"]} of {first["requests_compared"]} requests differ; '
                              f"invar run exit {rc}")
            result["first_vary_M"] = first.get("first_batch_size", "") if varied else ""
            result["first_vary_row"] = first.get("first_request", "") if varied else ""
            result["first_vary_shape"] = first["config"]
    return result


def _child(args):
    entries = {e[0]: e for e in (K.FAKE_KERNELS if args.fake else K.KERNELS)}
    engines = {e[0]: e for e in (K.FAKE_ENGINE if args.fake else K.ENGINE)}
    os.makedirs(args.out, exist_ok=True)
    if args.one:
        result = one_kernel(entries[args.one], args.device, args.out, args.quick)
    else:
        result = one_engine(engines[args.engine], args.device, args.out, args.engine_case)
    with open(os.path.join(args.out, "result.json"), "w") as f:
        json.dump(result, f)
    return 0


def _run_child(argv, out, limit):
    """Runs a child; its result.json, or a crash or timeout row."""
    os.makedirs(out, exist_ok=True)
    log = open(os.path.join(out, "child.log"), "w")
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__)] + argv, stdout=log, stderr=subprocess.STDOUT,
                           timeout=limit)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        return {"verdict": "error", "note": f"timed out after {limit} s"}
    finally:
        log.close()
    path = os.path.join(out, "result.json")
    if rc == 0 and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    with open(os.path.join(out, "child.log"), errors="replace") as f:
        tail = [line.strip() for line in f if line.strip()][-1:] or [""]
    if rc < 0:
        return {"verdict": "crash", "note": f"signal {signal.Signals(-rc).name}: {tail[0][:300]}"}
    return {"verdict": "error", "note": f"exit {rc}: {tail[0][:300]}"}


def main(argv):
    p = argparse.ArgumentParser(prog="tests/third_party/table.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--fake", choices=["numpy"], help="numpy stand-ins (the CPU self-test)")
    p.add_argument("--only", metavar="NAMES", help="comma-separated kernel names (default: all)")
    p.add_argument("--quick", action="store_true", help="the checker's --quick shapes and batch sizes")
    p.add_argument("--budget-s", type=int, default=0, help="seconds for the whole table (0: none); kernels "
                   "that would start past it are rows saying so")
    p.add_argument("--kernel-timeout-s", type=int, default=900)
    p.add_argument("--jobs", type=int, default=1, help="children at once (default 1); rows keep the table's "
                   "order, each written as soon as it and every row above it are known")
    p.add_argument("--no-engine", action="store_true", help="only the kernel checks")
    p.add_argument("--engine-case", metavar="FILE", help="the case of the end-to-end runs (default: "
                   "tests/third_party/engine.ini on cuda, cases/smoke.ini on the CPU)")
    p.add_argument("--one", help=argparse.SUPPRESS)
    p.add_argument("--engine", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.fake and args.device != "cpu":
        p.error("--fake numpy: only with --device cpu")
    if args.jobs < 1:
        p.error(f"--jobs {args.jobs}: at least 1")
    if not args.fake and args.device == "cpu":
        p.error("--device cpu: only with --fake numpy (the third-party kernels are CUDA kernels)")
    if args.engine_case is None:
        args.engine_case = os.path.join(ROOT, "cases", "smoke.ini") if args.device == "cpu" else \
            os.path.join(HERE, "engine.ini")
    if args.one or args.engine:
        return _child(args)

    kernels = K.FAKE_KERNELS if args.fake else K.KERNELS
    engines = [] if args.no_engine else (K.FAKE_ENGINE if args.fake else K.ENGINE)
    names = {e[0] for e in kernels} | {e[0] for e in engines}
    only = set(args.only.split(",")) if args.only else None
    if only and only - names:
        p.error(f"--only: unknown kernels {sorted(only - names)}; known: {sorted(names)}")
    os.makedirs(args.out, exist_ok=True)
    versions = _versions()
    common = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "device": _device_name(args.device), "commit": _commit(), "torch": versions["torch"],
              "triton": versions["triton"]}
    path = os.path.join(args.out, "third_party.csv")
    start = time.time()
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, quoting=csv.QUOTE_ALL, extrasaction="ignore", lineterminator="\n")
        w.writeheader()

        def row(fields):
            w.writerow({**{c: "" for c in COLUMNS}, **common, **fields})
            f.flush()
            print(f'{fields["verdict"]:<14} {fields["kernel"]:<26} {fields.get("op", ""):<12} '
                  f'{fields.get("note", "")}', flush=True)
            if fields["verdict"] == "skip":
                print(fields["note"], flush=True)

        def budget_left():
            return not args.budget_s or time.time() - start < args.budget_s

        base = [f"--device={args.device}"] + (["--fake", args.fake] if args.fake else []) + \
            (["--quick"] if args.quick else [])

        def judged(fields, argv, out):
            """A child's row, or a "not run" row when the budget was spent before it could start."""
            if not budget_left():
                return {**fields, "verdict": "not run", "note": f"the table's budget of {args.budget_s} s was spent"}
            return {**fields, **_run_child(argv + ["--out", out], out, args.kernel_timeout_s)}

        # Every row in the table's order: a fixed row, or a child to run (the budget is read when it starts).
        plan = []
        for name, source, op, adapter, claims, _ in kernels:
            if only and name not in only:
                continue
            fields = {"kind": "kernel", "kernel": name, "source": source, "op": op, "adapter": adapter,
                      "claims_invariant": "yes" if claims else "no"}
            plan.append((fields, base + ["--one", name], os.path.join(args.out, "kernels", name)))
        if not args.fake and not only:
            for name, source, why in K.NOT_JUDGED:
                plan.append(({"kind": "kernel", "kernel": name, "source": source, "verdict": "not judged",
                              "note": why}, None, None))
        for name, load, claims in engines:
            if only and name not in only:
                continue
            fields = {"kind": "engine", "kernel": name, "source": "invar run --kernel-set plugin:python",
                      "op": "gemm", "adapter": f"the engine's every GEMM; case {os.path.relpath(args.engine_case, ROOT)}",
                      "claims_invariant": "yes" if claims else "no"}
            plan.append((fields, base + ["--engine", name, "--engine-case", args.engine_case],
                         os.path.join(args.out, "engine", name)))
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(judged, fields, argv, out) if argv else None for fields, argv, out in plan]
            for (fields, _, _), fut in zip(plan, futures):
                row(fut.result() if fut else fields)
    print(f"table: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
