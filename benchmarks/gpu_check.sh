#!/usr/bin/env bash
# The GPU check: hpsearch's real CUDA path on a machine with an NVIDIA GPU, in under
# 6 minutes.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]
#
# OUT_DIR (new or empty; default a new folder under /tmp) gets the run dirs, the report
# and one log per check (OUT_DIR/<check>.log, and <check>.cli.log for what hpsearch
# printed). One line per check, "PASS <check>: <figures>" or "FAIL <check>: <why>",
# then a summary line. Exit 0 when every check passed, 1 when one failed, 2 at once
# (nothing run) when there is no NVIDIA GPU (nvidia-smi missing or listing none) or
# OUT_DIR is not empty. Python: the repository's .venv/bin/python if present, else
# python3. The checks themselves are in benchmarks/gpu_check.py.
#
# Checks, in order, each under `timeout` with its budget in seconds (typical times on
# an idle machine are a third of these or less):
#   doctor        35  `hpsearch doctor` on search_spaces/digits_gpu.yaml: no check fails,
#                     torch uses the GPUs NVML lists
#   plan          40  `hpsearch plan search_spaces/digits_gpu.yaml`: its memory estimate
#   digits        90  a short run of digits_gpu.yaml: 4 trials x 3 epochs, resources.gpu
#                     0.25 (sharing a GPU): all complete on CUDA, NVML utilisation and
#                     memory in the study
#   oom           70  benchmarks/gpu_oom.yaml: a real CUDA OOM at batch 256, one
#                     halve_batch rung in the study, then the trial completes at 128
#   report        20  `hpsearch report` on the digits run: the idle-GPU money line
#   sampler       20  the NVML sampler reads a busy GPU higher than an idle one
#   plan_vs_peak  30  plan's estimate at the digits trial with the largest real peak
#                     memory against that peak
#   ddp           45  only with two or more GPUs: one DDP trial on two GPUs
# Sum: 305 s with one GPU, 350 s with more; with 10 s for finding the GPU, 360 s at
# most: a step never runs past what is left of the 360 s.

set -u

TOTAL_S=360

# Builtins only until a GPU is found: without one, nothing else runs.
here=${BASH_SOURCE[0]%/*}
[[ $here == "${BASH_SOURCE[0]}" ]] && here=.
ROOT=$(cd -- "$here/.." && pwd) || exit 2

no_gpu() {
    echo "gpu_check: no NVIDIA GPU on this machine ($1): nothing was run" >&2
    exit 2
}

command -v nvidia-smi >/dev/null 2>&1 || no_gpu "nvidia-smi not found"
listing=$(timeout -k 2 10 nvidia-smi -L 2>&1)
listed=$?
[[ $listed -eq 0 ]] || no_gpu "nvidia-smi -L failed with exit $listed: ${listing%%$'\n'*}"
n_gpus=0
gpu_name=
while IFS= read -r line; do
    if [[ $line =~ ^GPU\ [0-9]+:\ (.+)$ ]]; then
        n_gpus=$((n_gpus + 1))
        [[ -n $gpu_name ]] || gpu_name=${BASH_REMATCH[1]%% (UUID*}
    fi
done <<<"$listing"
[[ $n_gpus -gt 0 ]] || no_gpu "nvidia-smi -L lists none: ${listing%%$'\n'*}"
if [[ -n ${CUDA_VISIBLE_DEVICES+set} ]]; then
    # The GPUs the checks may use: those CUDA_VISIBLE_DEVICES names.
    IFS=, read -r -a visible <<<"$CUDA_VISIBLE_DEVICES"
    [[ ${#visible[@]} -lt $n_gpus ]] && n_gpus=${#visible[@]}
    [[ $n_gpus -gt 0 ]] || no_gpu "CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides them all"
fi

OUT=${1:-}
if [[ -z $OUT ]]; then
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/hps-gpu-check.XXXXXX") || exit 2
elif [[ -e $OUT && -n $(ls -A -- "$OUT" 2>/dev/null) ]]; then
    echo "gpu_check: $OUT is not empty: give a new folder (a run dir there would be" \
         "continued, not run afresh)" >&2
    exit 2
fi
mkdir -p -- "$OUT" || exit 2
OUT=$(cd -- "$OUT" && pwd)
cd -- "$ROOT" || exit 2

if [[ -x $ROOT/.venv/bin/python ]]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export RAY_USAGE_STATS_ENABLED=0

n_pass=0
n_fail=0
failures=()

last_output() {  # the last non-empty line of the last of the files given that has one
    local text
    text=$(cat -- "$@" 2>/dev/null | grep -v '^[[:space:]]*$' | tail -n 1)
    echo "${text:0:300}"
}

check() {  # NAME BUDGET_S: run `python -m benchmarks.gpu_check NAME`; print its line
    local name=$1 budget=$2
    local left=$((TOTAL_S - SECONDS - 3))  # 3 s for a stuck process to be killed
    ((left < budget)) && budget=$left
    local line
    if ((budget < 5)); then
        line="FAIL $name: not run: the $TOTAL_S s budget is spent"
    else
        local log=$OUT/$name.log
        timeout -k 3 "$budget" "$PY" -m benchmarks.gpu_check "$name" --out "$OUT" \
            </dev/null >"$log" 2>&1
        local rc=$?
        line=$(grep -E "^(PASS|FAIL) $name: " "$log" | tail -n 1)
        if ((rc == 124 || rc == 137)); then
            line="FAIL $name: timed out after $budget s; last output: $(last_output \
                "$log" "$OUT/$name.cli.err" "$OUT/$name.cli.log")"
        elif [[ -z $line ]]; then
            line="FAIL $name: exit $rc without a verdict: $(last_output "$log")"
        elif ((rc != 0)) && [[ $line == PASS* ]]; then
            line="FAIL $name: exit $rc after: ${line#"PASS $name: "}"
        fi
    fi
    echo "$line"
    if [[ $line == PASS* ]]; then
        n_pass=$((n_pass + 1))
    else
        n_fail=$((n_fail + 1))
        failures+=("$name")
    fi
}

echo "gpu_check: $n_gpus GPU(s), ${gpu_name}; output in $OUT"
check doctor 35
check plan 40
check digits 90
check oom 70
check report 20
check sampler 20
check plan_vs_peak 30
if ((n_gpus >= 2)); then
    check ddp 45
fi

summary="gpu_check: $n_pass passed, $n_fail failed in $SECONDS s on $n_gpus x $gpu_name"
((n_gpus >= 2)) || summary+=" (ddp not run: one GPU)"
if ((n_fail > 0)); then
    echo "$summary; failed: ${failures[*]}; logs in $OUT"
    exit 1
fi
echo "$summary"
exit 0
