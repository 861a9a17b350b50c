#!/usr/bin/env bash
# Two calls on one H100 80GB HBM3 (2026-12-07, tree f3b55b8: the cuBLASLt workspace per stream, the GPU tests with
# gradient accumulation fusion), from the checkout's root with the wheels of flag-gems and liger-kernel in .whl:
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src:$PWD:$PYTHONPATH
set -o pipefail
OUT=$OUT FP8_BUDGET_S=230 FP8_STAGES="tests tests_curves" bash bench/gpu_fp8.sh 2>&1 | tee $OUT/log.txt  # ran tests only (tests_curves did not fit the budget)
OUT=$OUT FP8_BUDGET_S=0 FP8_STAGES="tests_curves" timeout 230 bash bench/gpu_fp8.sh 2>&1 | tee $OUT/log.txt
