#!/usr/bin/env bash
# tests/test_model_dir.sh BUILD — checkpoint directories as models: `[case] model = DIR`,
# `[matrix] models = NAME, DIR` and `invar run --model DIR` load a checkpoint written by
# `invar model write --config tiny --seed S` and must give exactly what the named config with
# seed S gives (the synthetic weights are the same bit for bit): the same summary rows (timing
# and names aside) and the same divergence.csv. A directory that is not a valid checkpoint is
# exit 2 with a message naming the file. About 10 s on 2 cores.
set -u
BUILD=${1:-build}
INVAR="$BUILD/invar"
command -v python3 >/dev/null || { echo "FAIL: python3 is needed to parse the CSVs"; exit 1; }
[ -x "$INVAR" ] || { echo "FAIL: $INVAR not built"; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/invar-model-dir.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
SEED=31

"$INVAR" model write --config tiny --seed "$SEED" --out "$work/ckpt" >"$work/write.log" 2>&1 ||
    { cat "$work/write.log"; fail "invar model write failed"; }

# case_file NAME CASE_LINE [MATRIX_LINE]: a small case (both kernel sets, so there are
# divergences to compare) with the model given in [case] or in [matrix].
case_file() {
    cat >"$work/$1.ini" <<INI
[case]
name = model-dir
$2
seed = $SEED

[prompts]
count = 5
min_len = 20
max_len = 90
max_new_tokens = 4
temperature = 0
top_k = 4

[matrix]
devices = cpu
kernel_sets = invariant, reference
batch_sizes = 2, 5
max_num_batched_tokens = 40
chunked_prefill = on
threads = 2
${3:-}
INI
}
case_file named "model = tiny"
case_file dir "model = $work/ckpt"
case_file both "" "models = tiny, $work/ckpt"

run() {  # run OUT ARGS...: a run whose expectations hold
    local out=$1
    shift
    "$INVAR" run -q "$@" --out "$work/$out" >"$work/$out.log" 2>&1
    local rc=$?
    [ "$rc" = 0 ] || { cat "$work/$out.log"; fail "invar run $* exited $rc"; }
}
run named --case "$work/named.ini"
run dir --case "$work/dir.ini"
run flag --case "$work/named.ini" --model "$work/ckpt"
run both --case "$work/both.ini"

python3 - "$work" <<'PY' || fail "a checkpoint directory gave other results than the named config"
import csv, sys
w = sys.argv[1]
def rows(d, name):
    with open(f"{w}/{d}/{name}", newline="") as f:
        r = list(csv.reader(f))
    return r[0], r[1:]
def outcome(d, model=None):
    # Every column but the time, the model (a name or a path) and the config name (which embeds
    # the model when a case lists several); keyed by kernel set.
    head, body = rows(d, "summary.csv")
    skip = {"seconds", "model", "config"}
    out = {}
    for r in body:
        if model and r[head.index("model")] != model:
            continue
        out[r[head.index("kernel_set")]] = [v for h, v in zip(head, r) if h not in skip]
    return out
def divergence(d, model_part=None):
    head, body = rows(d, "divergence.csv")
    out = []
    for r in body:
        cfg = r[0]
        if model_part is not None:
            if not cfg.endswith("/model=" + model_part):
                continue
            cfg = cfg[: -len("/model=" + model_part)]
        out.append([cfg] + r[1:])
    return out
named = outcome("named")
assert set(named) == {"invariant", "reference"}, named.keys()
verdicts = {k: v for k, v in named.items()}
ckpt = f"{w}/ckpt"
for d, model in (("dir", None), ("flag", None), ("both", ckpt)):
    got = outcome(d, model)
    assert got == named, f"{d}: summary differs:\n{got}\nvs\n{named}"
base = divergence("named")
assert base, "the reference set diverged nowhere: the case is too weak"
for d, part in (("dir", None), ("flag", None), ("both", ckpt), ("both", "tiny")):
    got = divergence(d, part)
    assert got == base, f"{d} ({part}): divergence.csv differs ({len(got)} vs {len(base)} rows)"
print(f"checkpoint == named config: 2 configs x 4 runs, {len(base)} divergence rows each")
PY
grep -q -- "--model $work/ckpt" "$work/flag/meta.csv" || fail "meta.csv does not record --model"

# Not a checkpoint: exit 2, naming the file.
expect_refusal() {  # expect_refusal WHAT PATTERN ARGS...
    local what=$1 pattern=$2
    shift 2
    "$INVAR" run "$@" --out "$work/refused" >"$work/refused.log" 2>&1
    local rc=$?
    [ "$rc" = 2 ] || { cat "$work/refused.log"; fail "$what: exit $rc, not 2"; }
    grep -q -- "$pattern" "$work/refused.log" || { cat "$work/refused.log"; fail "$what: no '$pattern' in the message"; }
    echo "refused ($what): $(grep -m1 -- "$pattern" "$work/refused.log")"
}
mkdir -p "$work/empty"
case_file empty "model = $work/empty"
expect_refusal "a directory without config.json" "config.json" --case "$work/empty.ini"
expect_refusal "--model with a directory without config.json" "^invar: error: --model: .*config.json" \
    --case "$work/named.ini" --model "$work/empty"
cp -r "$work/ckpt" "$work/broken"
python3 - "$work/broken/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
del c["kv_lora_rank"]
json.dump(c, open(p, "w"))
PY
case_file broken "model = $work/broken"
expect_refusal "config.json without kv_lora_rank" "kv_lora_rank" --case "$work/broken.ini"
cp -r "$work/ckpt" "$work/truncated"
for f in "$work/truncated"/*.safetensors; do truncate -s 1000 "$f"; done
case_file truncated "model = $work/truncated"
expect_refusal "a truncated safetensors file" "safetensors" --case "$work/truncated.ini"
expect_refusal "an unknown model name" "unknown model 'no-such-model'" \
    --case "$work/named.ini" --model no-such-model
# --resume refuses a checkpoint that changed since the run started (issue 12, defect 5), naming
# the file and what changed, and leaves the report as it was; unchanged, it resumes.
cp -r "$work/ckpt" "$work/moving"
case_file moving "model = $work/moving"
run moving --case "$work/moving.ini" --hash-weights
grep -q "^\"checkpoint:$work/moving\",.*config.json: xxh64=.*header_xxh64=.* xxh64=" \
    "$work/moving/meta.csv" || fail "meta.csv lacks the checkpoint identity"
cp "$work/moving/summary.csv" "$work/moving.summary.before"
resume_refused() {  # resume_refused WHAT PATTERN
    "$INVAR" run -q --resume "$work/moving" >"$work/moving-resume.log" 2>&1
    local rc=$?
    [ "$rc" = 2 ] || { cat "$work/moving-resume.log"; fail "$1: --resume exited $rc, not 2"; }
    grep -q -- "$2" "$work/moving-resume.log" || { cat "$work/moving-resume.log"; fail "$1: no '$2'"; }
    cmp -s "$work/moving.summary.before" "$work/moving/summary.csv" || fail "$1: summary.csv changed"
    echo "refused ($1): $(grep -m1 -- "$2" "$work/moving-resume.log")"
}
"$INVAR" run -q --resume "$work/moving" >"$work/moving-resume.log" 2>&1 ||
    { cat "$work/moving-resume.log"; fail "--resume of an unchanged checkpoint failed"; }
cp "$work/moving.summary.before" "$work/moving/summary.csv"
st="$(ls "$work/moving"/*.safetensors | head -n 1)"
cp -p "$st" "$work/st.orig"
# Same size, same mtime, same header: one byte of the weights flipped; --hash-weights sees it.
python3 - "$st" <<'PY'
import os, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    f.seek(-1, os.SEEK_END)
    b = f.read(1)
    f.seek(-1, os.SEEK_END)
    f.write(bytes([b[0] ^ 1]))
PY
touch -r "$work/st.orig" "$st"
resume_refused "weights rewritten in place" "checkpoint $work/moving changed since the run started: $(basename "$st"): content xxh64 was"
cp -p "$work/st.orig" "$st"
touch "$st"
resume_refused "a safetensors file touched" "$(basename "$st"): mtime was"
cp -p "$work/st.orig" "$st"
cp "$work/moving/config.json" "$work/config.orig"
echo " " >>"$work/moving/config.json"
resume_refused "config.json edited" "config.json: content xxh64 was"
cp "$work/config.orig" "$work/moving/config.json"
cp -p "$st" "$work/moving/extra.safetensors"
resume_refused "a safetensors file added" "extra.safetensors: new"
rm "$work/moving/extra.safetensors"
"$INVAR" run -q --resume "$work/moving" >"$work/moving-resume.log" 2>&1 ||
    { cat "$work/moving-resume.log"; fail "--resume after restoring the checkpoint failed"; }
echo "model directories: OK"
