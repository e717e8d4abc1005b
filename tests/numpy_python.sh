#!/usr/bin/env bash
# tests/numpy_python.sh — prints the python3 the Python bridge's tests run (PATH's, else Debian's
# /usr/bin/python3, the first that imports numpy) and exits 0; exits 1, printing nothing, when
# neither does. One rule for make check (run_all.sh), test_bridge.sh and the mutation ladder, so
# the ladder runs the bridge's suite exactly where make check does.
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then
        echo "$p"
        exit 0
    fi
done
exit 1
