# call 4 (2026-12-07, the H100 of calls 1-3, warm): the e2e281_1x8 settings of bench/gpu_fp8.sh, six runs alternating
# bf16 / fp8 tensorwise / fp8 delayed, with FL_GEMS_FP8_SWIGLU_CAST=tensorwise,delayed (the same as the default for
# bf16 and tensorwise; for delayed, the SwiGLU kernels also write fc2's fp8 input). Run in the repository root with
# the wheels of .whl installed into /tmp/site as bench/gpu_fp8.sh's header says.
export PYTHONPATH=/tmp/site:$PWD/src:$PWD:$PYTHONPATH PYTHONWARNINGS=ignore
M="--preset llama131 --layers 26 --hidden 3072 --heads 24 --groups 8 --ffn 8192 --spec te --mbs 1 --microbatches 8 --steps 8 --cuda-graph --grad-accum-fusion --fused-qkv-rope --manual-gc --gpu-clocks"
for r in "bf16_2:" "fp8t_2:--fp8 hybrid --fp8-recipe tensorwise" \
  "fp8d_sw:--fp8 hybrid --fp8-recipe delayed --fp8-amax-history-len 16 --fp8-amax-compute-algo max" "bf16_3:" \
  "fp8t_3:--fp8 hybrid --fp8-recipe tensorwise" \
  "fp8d_sw2:--fp8 hybrid --fp8-recipe delayed --fp8-amax-history-len 16 --fp8-amax-compute-algo max"; do
  n=${r%%:*}; a=${r#*:}
  env MG_FL_PREFER=flaggems TRITON_CACHE_DIR=/tmp/fp8_warm/triton FL_GEMS_CACHE_DIR=/tmp/fp8_warm/gems \
    FL_GEMS_FP8_SWIGLU_CAST=tensorwise,delayed timeout 150 python3 tests/support/flaggems/gems_gpt.py --mode throughput \
    $M $a --out "$OUT/b3_$n.json" > "/tmp/b3_$n.log" 2>&1
done
