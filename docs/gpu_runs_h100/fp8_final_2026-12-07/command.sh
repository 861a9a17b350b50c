#!/usr/bin/env bash
# The call behind this folder (one H100 80GB HBM3, 2026-12-07, tree 3d8adcd: the code of 056b771), run from the
# checkout's root on the device with the wheels of flag-gems and liger-kernel in .whl:
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD/src:$PWD:$PYTHONPATH
set -o pipefail
S281=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | awk '{print ($1>100000)?"e2e281":"e2e281_1x8"}')
OUT=$OUT FP8_BUDGET_S=520 FP8_STAGES="tests e2e131 tests_curves $S281" bash bench/gpu_fp8.sh 2>&1 | tee $OUT/log.txt
