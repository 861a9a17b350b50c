#!/usr/bin/env bash
# Issue 45 on one Hopper GPU (the log's first lines name it): the FlagGems pack's patches compared, call by call,
# with megatron's own functions, forward and backward (docs/compare.md, "The FlagGems pack on a GPU"), and the
# whole-run compare against upstream. Each stage has its own time limit, so one failure leaves the others' results.
# COMPARE_STAGES picks stages (default: all, in this order):
#   table       the per-call table of every FlagGems patch the demo reaches (local spec, bf16, RMSNorm, SwiGLU, RoPE,
#               causal flash attention, vocab-parallel cross entropy, FusedAdam's step, the multi-tensor helpers),
#               then the same with LayerNorm and query-key layer scaling (the LayerNorm kernel, the masked softmax)
#   planted     the planted wrong plugin (tests/support/compare/compare_wrong) on the GPU: each must be "differs"
#   whole       the whole-run compare, 300 steps, the pack against upstream; and upstream against upstream (the
#               same command twice: how far two runs of upstream itself part on this GPU)
# Results in $OUT: compare_rmsnorm.jsonl, compare_layernorm.jsonl, compare_planted.jsonl, whole_pack.json,
# whole_upstream.json (each whole run's summary.json), and the caller's log.
# Run as (flag-gems and liger-kernel wheels in .whl):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site:$PWD/src:$PYTHONPATH || exit
#   set -o pipefail; OUT=$OUT bash bench/gpu_compare.sh 2>&1 | tee $OUT/log.txt
set -u
OUT=${OUT:-/tmp/compare_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export PYTHONWARNINGS="ignore::UserWarning,ignore::FutureWarning,ignore::DeprecationWarning"
STAGES=${COMPARE_STAGES:-table planted whole}
START=$SECONDS
source "$(dirname "$0")/support/stages.sh"  # stage, fits
table_of() {  # the exit table a run printed: from its header to the end of stderr
  sed -n '/^fl_patch compare (/,$p' "$1" | cut -c1-400 | head -${2:-40}
}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
python3 -c "import torch, triton, sys; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.get_device_name())"
# A small Llama-style GPT the demo builds: 4 layers, hidden 512, 8 heads (head dim 64), seq 512, vocab 2048, bf16,
# no dropout (the pack's flash attention takes plain causal softmax attention; dropout would send it upstream).
model=(--num-layers 4 --hidden-size 512 --num-heads 8 --seq-length 512 --vocab-size 2048 --micro-batch-size 4
  --num-microbatches 2 --dropout 0 --precision bf16 --quiet)
pack=(env MG_FL_PREFER=flaggems TRITON_CACHE_DIR=/tmp/cmp_warm/triton FL_GEMS_CACHE_DIR=/tmp/cmp_warm/gems)
for s in $STAGES; do
  case $s in
    table)
      stage table_rmsnorm "${pack[@]}" timeout 240 python3 -m fl_patch --compare 3 --compare-json "$OUT/compare_rmsnorm.jsonl" \
        examples/train_gpt.py "${model[@]}" --normalization RMSNorm --swiglu --steps 4 > /tmp/cmp_rmsnorm.log 2>&1
      table_of /tmp/cmp_rmsnorm.log 60
      grep -v "Warning\|warn" /tmp/cmp_rmsnorm.log | grep "Error\|Traceback\|step 4" | tail -5
      stage table_layernorm "${pack[@]}" timeout 240 python3 -m fl_patch --compare 3 \
        --compare-json "$OUT/compare_layernorm.jsonl" examples/train_gpt.py "${model[@]}" --normalization LayerNorm \
        --apply-query-key-layer-scaling --steps 4 > /tmp/cmp_layernorm.log 2>&1
      table_of /tmp/cmp_layernorm.log 60
      grep -v "Warning\|warn" /tmp/cmp_layernorm.log | grep "Error\|Traceback\|step 4" | tail -5 ;;
    planted)  # vendor default: chosen on any machine; fp32, the demo's default precision, as the CPU test runs it
      stage planted env PYTHONPATH="$PWD/tests/support/compare:$PYTHONPATH" timeout 240 python3 -m fl_patch --compare 3 \
        --compare-json "$OUT/compare_planted.jsonl" --registry compare_wrong.registry examples/train_gpt.py --steps 2 \
        --warmup-steps 0 --num-microbatches 1 --quiet --normalization RMSNorm --swiglu --apply-query-key-layer-scaling \
        > /tmp/cmp_planted.log 2>&1
      table_of /tmp/cmp_planted.log 30 ;;
    whole)
      long=(examples/train_gpt.py "${model[@]}" --normalization RMSNorm --swiglu --steps 300 --warmup-steps 20 --lr 1e-3)
      stage whole_pack "${pack[@]}" timeout 300 python3 -m fl_patch compare --baseline upstream --out /tmp/cmp_whole_pack \
        -- "${long[@]}" > /tmp/cmp_whole_pack.log 2>&1
      grep -v "Warning\|warn" /tmp/cmp_whole_pack.log | grep -i "part\|first\|differ\|step  *300\|Error" | head -12 | cut -c1-300
      cp /tmp/cmp_whole_pack/summary.json "$OUT/whole_pack.json" 2>/dev/null
      stage whole_upstream timeout 300 python3 -m fl_patch compare --baseline upstream --calls 0 \
        --out /tmp/cmp_whole_upstream -- "${long[@]}" > /tmp/cmp_whole_upstream.log 2>&1
      grep -v "Warning\|warn" /tmp/cmp_whole_upstream.log | grep -i "part\|first\|step  *300\|Error" | head -8 | cut -c1-300
      cp /tmp/cmp_whole_upstream/summary.json "$OUT/whole_upstream.json" 2>/dev/null ;;
  esac
done
echo "=== done in $((SECONDS - START)) s"
