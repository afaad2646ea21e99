#!/usr/bin/env bash
# The CUDA checks of issue 37 in one device call (about 9 minutes): the CUDA tests (tests/gpu:
# the compiled step replayed as a CUDA graph too), the MLP rows eager vs compiled with the
# kernel-time floor, the ssgmcmc-resnet pair's step costs (--probe), Sd K = 8 / base compiled,
# and the ResNet-20 rows. Each section has its own time limit and writes its log (and JSON rows)
# to $OUT; a section that would not finish before the call's end is skipped and says so.
#
#     bash bench/gpu_check.sh            # on the device machine: python3 there holds CUDA PyTorch
set -u
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH=src:tests:bench PYTHONUNBUFFERED=1
# Inductor says why it did not capture a CUDA graph ("skipping cudagraphs due to ...")
export TORCH_LOGS=${TORCH_LOGS:-perf_hints}
BUDGET=${BUDGET:-540}
START=$SECONDS
ONLY=${ONLY:-}  # e.g. ONLY="tests mlp": run these sections alone (a second call for what changed)
section() {  # section NAME LIMIT COMMAND...: run it when LIMIT seconds are left, else skip
    local name=$1 limit=$2
    shift 2
    if [[ -n $ONLY && " $ONLY " != *" $name "* ]]; then
        return
    fi
    local left=$((BUDGET - (SECONDS - START)))
    if ((left < 30)); then
        echo "== $name: skipped ($left s left)" | tee -a "$OUT/summary.log"
        return
    fi
    ((limit > left)) && limit=$left
    echo "== $name (limit $limit s, at $((SECONDS - START)) s)" | tee -a "$OUT/summary.log"
    timeout -s INT "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: exit $? after $((SECONDS - START)) s" | tee -a "$OUT/summary.log"
    tail -n 25 "$OUT/$name.log"
}
{ nvidia-smi -L; "$PY" -c "import torch, sys; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name())"; git log -1 --format='%h %s' 2>/dev/null; } | tee "$OUT/summary.log"
section tests 150 "$PY" -m pytest -q -p no:cacheprovider tests/gpu -k "${TESTS_K:-}"
section mlp 150 "$PY" bench/bench_samplers.py --device cuda --execution eager,compiled --floor --rounds 3 \
    --steps 100 --samplers "${MLP_SAMPLERS:-SGLD,pSGLD,CV}" --chains "${MLP_CHAINS-32}" --posteriors off --json "$OUT/mlp.json"
section pair_probe 170 "$PY" bench/gpu_resnet_pair.py --probe "${PROBE_STEPS:-60}"
section structured 90 "$PY" bench/bench_structured.py --device cuda --execution eager,compiled --copies 8 \
    --rounds 3 --steps 60
section resnet 120 "$PY" bench/bench_samplers.py --model resnet20 --device cuda --execution eager,compiled \
    --floor --rounds 3 --steps 20 --samplers SGLD --chains "" --posteriors off --json "$OUT/resnet.json"
grep -h -i -E "skipping cudagraphs|FALLBACK|CompileFallbackWarning|^FAILED|Error:" "$OUT"/*.log | sort | uniq -c | head -40 | tee -a "$OUT/summary.log"
echo "== done after $((SECONDS - START)) s" | tee -a "$OUT/summary.log"
