"""Compile every Triton kernel of the FlagGems pack for an H100/H200 (sm_90), on a machine without a GPU.

Why: Triton's CPU interpreter runs a kernel as Python, so it accepts code that the
GPU compiler rejects (seen: a second ``return`` in a branch a constexpr removes ran in
the interpreter and failed to compile on the H200). ``triton.compile`` with a CUDA
target needs no GPU: it runs the same front end, the LLVM passes and ptxas (bundled
with triton) that a launch on the device runs.

Each kernel is compiled for the constexpr values that select each of its branches
(every flag both ways at least once), with the pointer dtypes the pack passes.
Prints one JSON line per compile and a summary line; exit status 1 if any failed.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from fl_patch.impls.flaggems.kernels import (
    attention,
    cross_entropy,
    fp8_cast,
    moe_permute,
    norms,
    rope,
    softmax,
    swiglu,
    swiglu_fp8,
)

TARGET = GPUTarget("cuda", 90, 32)

# The pointer arguments of each kernel and the dtypes the pack passes (bf16 activations,
# fp32 statistics, partial sums and angles); every other argument is an int32 size or
# stride, or one of FLOAT_SCALARS.
_ATTN = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "DO": "*bf16", "LSE": "*fp32", "DELTA": "*fp32"}
POINTERS = {
    "_attn_fwd": {**_ATTN, "OUT": "*bf16"},
    "_attn_bwd_delta": {"OUT": "*bf16", "DO": "*bf16", "DELTA": "*fp32"},
    "_attn_bwd_dq": {**_ATTN, "DQ": "*bf16"},
    "_attn_bwd_dkdv": {**_ATTN, "DK": "*bf16", "DV": "*bf16"},
    "_ce_fwd": {"X": "*bf16", "TARGET": "*i64", "LOSS": "*fp32", "LSE": "*fp32"},
    "_ce_bwd": {"X": "*bf16", "TARGET": "*i64", "LSE": "*fp32", "GRAD": "*fp32", "DX": "*bf16"},
    "_ce_fwd_partial": {"X": "*bf16", "TARGET": "*i64", "MAX": "*fp32", "SUMEXP": "*fp32", "PRED": "*fp32"},
    "_rms_fwd": {"X": "*bf16", "W": "*bf16", "Y": "*bf16", "RSTD": "*fp32", "AMAX": "*fp32"},
    "_rms_bwd": {"X": "*bf16", "W": "*bf16", "DY": "*bf16", "DX": "*bf16", "RSTD": "*fp32", "DW_PART": "*fp32"},
    "_ln_fwd": {
        "X": "*bf16", "W": "*bf16", "B": "*bf16", "Y": "*bf16", "MEAN": "*fp32", "RSTD": "*fp32", "AMAX": "*fp32",
    },
    "_ln_bwd": {
        "X": "*bf16", "W": "*bf16", "DY": "*bf16", "DX": "*bf16", "MEAN": "*fp32", "RSTD": "*fp32",
        "DW_PART": "*fp32", "DB_PART": "*fp32",
    },
    "_sum_parts": {"PART_A": "*fp32", "OUT_A": "*bf16", "PART_B": "*fp32", "OUT_B": "*bf16"},
    "_softmax_fwd": {"X": "*bf16", "MASK": "*u8", "Y": "*bf16"},
    "_softmax_bwd": {"Y": "*bf16", "DY": "*bf16", "MASK": "*u8", "DX": "*bf16"},
    "_swiglu_fwd": {"Y": "*bf16", "BIAS": "*bf16", "OUT": "*bf16"},
    "_swiglu_bwd": {"Y": "*bf16", "BIAS": "*bf16", "DOUT": "*bf16", "DY": "*bf16"},
    "_rope": {"T": "*bf16", "FREQ": "*fp32", "OUT": "*bf16"},
    "_qkv_rope_fwd": {"MIXED": "*bf16", "QF": "*fp32", "KF": "*fp32", "Q": "*bf16", "K": "*bf16", "V": "*bf16"},
    "_qkv_rope_bwd": {"DQ": "*bf16", "DK": "*bf16", "DV": "*bf16", "QF": "*fp32", "KF": "*fp32", "DMIXED": "*bf16"},
    "_scatter_rows": {"X": "*bf16", "W": "*fp32", "PROBS": "*fp32", "PROBS_OUT": "*fp32", "MAP": "*i32", "OUT": "*bf16"},
    "_gather_rows": {"X": "*bf16", "W": "*fp32", "GRAD_PP": "*fp32", "GRAD_P": "*fp32", "MAP": "*i32", "OUT": "*bf16"},
    "_weight_grad": {"A": "*bf16", "B": "*bf16", "MAP": "*i32", "GW": "*fp32"},
    "_map_columns": {"MASK": "*u8", "STARTS": "*i64", "DENSE": "*i32"},
    "_map_rows": {"DENSE": "*i32", "MAP": "*i32"},
    "_sort_chunks": {"SRC": "*bf16", "DST": "*bf16", "P_SRC": "*fp32", "P_DST": "*fp32", "SIZES": "*i64", "ORDER": "*i64"},
    # fp8 casts: the fp8 bytes written through uint8 views
    "_amax_kernel": {"X": "*bf16", "AMAX": "*fp32"},
    "_cast_kernel": {
        "X": "*bf16", "Q": "*u8", "QT": "*u8", "SCALE": "*fp32", "SCALE_INV": "*fp32", "AMAX": "*fp32",
    },
    "_cast_1x128_kernel": {"X": "*bf16", "Q": "*u8", "S": "*fp32", "QT": "*u8", "ST": "*fp32"},
    "_cast_128x128_kernel": {"X": "*bf16", "Q": "*u8", "S": "*fp32", "QT": "*u8", "ST": "*fp32"},
    # the SwiGLU kernels that make the fp8 casts (fp8_swiglu.py)
    "_swiglu_fp8_fwd": {
        "Y": "*bf16", "BIAS": "*bf16", "OUT": "*bf16", "Q": "*u8", "QT": "*u8", "SCALE": "*fp32", "SCALE_INV": "*fp32",
        "AMAX": "*fp32",
    },
    "_swiglu_fp8_bwd": {
        "Y": "*bf16", "BIAS": "*bf16", "DOUT": "*bf16", "DY": "*bf16", "Q": "*u8", "QT": "*u8", "SCALE": "*fp32",
        "SCALE_INV": "*fp32", "AMAX": "*fp32",
    },
}  # fmt: skip
FLOAT_SCALARS = {"qk_scale", "sm_scale", "eps", "mscale", "scale", "smoothing", "FP8_MAX", "MARGIN"}


def _signature(kernel: triton.JITFunction, constexprs: dict) -> dict:
    pointers = POINTERS[kernel.__name__]
    signature = {}
    for param in kernel.params:
        name = param.name
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in pointers:
            signature[name] = pointers[name]
        else:
            signature[name] = "fp32" if name in FLOAT_SCALARS else "i32"
    return signature


def _attention_cases() -> list[tuple]:
    """The tiles the pack launches: for half input (tf32, tensor cores) each kernel's fixed config, the first of its
    autotune list (``attention._FWD``, ``_DQ``, ``_DKDV``); for IEEE products (the pack's fp32 input) its tiles
    ``attention._SMALL``, on the bf16 pointers of POINTERS (fp32 operands compile several times as long). The two
    differ in every other flag too: causal or not, head dim 128 or 80 (masked to BLOCK_D 128)."""
    cases: list[tuple] = []
    for causal, head_dim, precision in ((True, 128, "tf32"), (False, 80, "ieee")):
        common = {"CAUSAL": causal, "HEAD_DIM": head_dim, "BLOCK_D": 128, "PRECISION": precision}
        for kernel, kind, table in (
            (attention._attn_fwd, "fwd", attention._FWD),
            (attention._attn_bwd_dq, "dq", attention._DQ),
            (attention._attn_bwd_dkdv, "dkdv", attention._DKDV),
        ):
            block_m, block_n, warps, stages = table[0] if precision == "tf32" else attention._SMALL[kind]
            cases.append((kernel, {**common, "BLOCK_M": block_m, "BLOCK_N": block_n}, warps, stages))
    cases.append((attention._attn_bwd_delta, {"HEAD_DIM": 80, "BLOCK_D": 128, "BLOCK_M": 64}, 4))
    return cases


def cases() -> list[tuple]:
    """(kernel, constexprs, num_warps[, num_stages]) for every branch of every kernel the pack launches."""
    out = _attention_cases()
    out += [
        (cross_entropy._ce_fwd, {"SMOOTH": True, "BLOCK": 4096}, 8),
        (cross_entropy._ce_fwd, {"SMOOTH": False, "BLOCK": 4096}, 8),
        (cross_entropy._ce_bwd, {"BLOCK": 4096}, 8),
        (cross_entropy._ce_fwd_partial, {"BLOCK": 4096}, 8),
        (norms._rms_fwd, {"HAS_AMAX": False, "BLOCK_M": 2, "BLOCK_N": 2048}, 8),
        (norms._rms_fwd, {"HAS_AMAX": True, "BLOCK_M": 2, "BLOCK_N": 2048}, 8),
        (norms._rms_bwd, {"BLOCK_M": 1, "BLOCK_N": 2048, "PPS": 4}, 8),
        (norms._ln_fwd, {"HAS_BIAS": True, "HAS_AMAX": False, "BLOCK_M": 1, "BLOCK_N": 4096}, 8),
        (norms._ln_fwd, {"HAS_BIAS": False, "HAS_AMAX": False, "BLOCK_M": 1, "BLOCK_N": 4096}, 8),
        (norms._ln_fwd, {"HAS_BIAS": True, "HAS_AMAX": True, "BLOCK_M": 1, "BLOCK_N": 4096}, 8),
        (norms._ln_fwd, {"HAS_BIAS": False, "HAS_AMAX": True, "BLOCK_M": 4, "BLOCK_N": 1024}, 4),
        (norms._ln_bwd, {"HAS_BIAS": True, "BLOCK_M": 1, "BLOCK_N": 4096, "PPS": 2}, 8),
        (norms._ln_bwd, {"HAS_BIAS": False, "BLOCK_M": 4, "BLOCK_N": 4096, "PPS": 1}, 16),
        (norms._sum_parts, {"HAS_B": True, "BLOCK_P": 1024, "BLOCK_C": 8}, 8),
        (norms._sum_parts, {"HAS_B": False, "BLOCK_P": 256, "BLOCK_C": 32}, 8),
        (softmax._softmax_fwd, {"MASK_KIND": 0, "BLOCK": 2048}, 8),
        (softmax._softmax_fwd, {"MASK_KIND": 1, "BLOCK": 2048}, 8),
        (softmax._softmax_bwd, {"MASK_KIND": 2, "BLOCK": 2048}, 8),
        (swiglu._swiglu_fwd, {"HAS_BIAS": True, "BLOCK_M": 1, "BLOCK_F": 8192}, 8),
        (swiglu._swiglu_bwd, {"HAS_BIAS": False, "BLOCK_M": 1, "BLOCK_F": 8192}, 8),
        (swiglu._swiglu_bwd, {"HAS_BIAS": True, "BLOCK_M": 2, "BLOCK_F": 1024}, 4),
        (moe_permute._scatter_rows, {"HAS_W": False, "HAS_PROBS": True, "BLOCK_H": 4096}, 8),
        (moe_permute._scatter_rows, {"HAS_W": True, "HAS_PROBS": False, "BLOCK_H": 1024}, 4),
        (moe_permute._gather_rows, {"HAS_W": False, "HAS_PROBS": True, "BLOCK_H": 4096}, 8),
        (moe_permute._gather_rows, {"HAS_W": True, "HAS_PROBS": False, "BLOCK_H": 512}, 4),
        (moe_permute._weight_grad, {"BLOCK_H": 1024}, 4),
        (moe_permute._map_columns, {"BLOCK_T": 1024}, 4),
        (moe_permute._map_rows, {"BLOCK_T": 64, "E_PAD": 64}, 4),
        # the tiles moe_permute._sort launches (BLOCK_R = 8192 // BLOCK_H, 8 warps) at hidden 1024 and 2048
        (moe_permute._sort_chunks, {"REVERSE": False, "HAS_P": True, "BLOCK_R": 8, "BLOCK_H": 1024, "C_PAD": 256}, 8),
        (moe_permute._sort_chunks, {"REVERSE": True, "HAS_P": False, "BLOCK_R": 4, "BLOCK_H": 2048, "C_PAD": 8}, 8),
    ]
    # HW: the GPU's fp8 conversion (what runs on a GPU), and the integer path once
    e4m3, e5m2 = ({"MANT": 3, "BIAS": 7, "EMIN": -6, "HW": True}, {"MANT": 2, "BIAS": 15, "EMIN": -14, "HW": True})
    out += [
        (fp8_cast._amax_kernel, {"BLOCK_M": 64, "BLOCK_N": 128}, 8),
        (
            fp8_cast._cast_kernel,
            {"MODE": 0, **e4m3, "WRITE_Q": True, "WRITE_QT": True, "BLOCK_M": 64, "BLOCK_N": 128},
            8,
        ),
        (
            fp8_cast._cast_kernel,
            {"MODE": 1, **e5m2, "WRITE_Q": True, "WRITE_QT": False, "BLOCK_M": 64, "BLOCK_N": 128},
            8,
        ),
        (
            fp8_cast._cast_kernel,
            {"MODE": 0, **e5m2, "WRITE_Q": False, "WRITE_QT": True, "BLOCK_M": 64, "BLOCK_N": 128},
            8,
        ),
        (
            fp8_cast._cast_kernel,
            {"MODE": 1, **e4m3, "HW": False, "WRITE_Q": True, "WRITE_QT": True, "BLOCK_M": 128, "BLOCK_N": 128},
            8,
        ),
        (fp8_cast._cast_1x128_kernel, {**e4m3, "WRITE_QT": True, "BLOCK": 128}, 16),
        (fp8_cast._cast_1x128_kernel, {**e4m3, "WRITE_QT": False, "BLOCK": 128}, 8),
        (fp8_cast._cast_128x128_kernel, {**e4m3, "BLOCK": 128}, 16),
    ]
    # the SwiGLU's casts: amax only (tensorwise), and the fp8 copies with and without the transpose (delayed)
    swiglu_tile = {"BLOCK_M": 32, "BLOCK_F": 128}
    e4m3_s, e5m2_s = ({**f, "EBIAS": f["BIAS"]} for f in (e4m3, e5m2))
    for kernel in (swiglu_fp8._swiglu_fp8_fwd, swiglu_fp8._swiglu_fp8_bwd):
        for fmt, cast, write_qt, has_bias in (
            (e4m3_s, False, False, False),
            (e5m2_s, True, True, True),
            (e4m3_s, True, False, False),
        ):
            flags = {k: v for k, v in fmt.items() if k != "BIAS"}
            out.append((kernel, {**flags, "HAS_BIAS": has_bias, "CAST": cast, "WRITE_QT": write_qt, **swiglu_tile}, 8))
    rope_common = {"BLOCK_BH": 16, "BLOCK_E": 128}
    for backward, interleaved, has_pass in ((False, False, False), (True, True, True), (True, False, True)):
        flags = {"BACKWARD": backward, "INTERLEAVED": interleaved, "HAS_PASS": has_pass}
        out.append((rope._rope, {**rope_common, **flags, "BLOCK_P": 64 if has_pass else 1}, 4))
    for interleaved, same, has_pass in ((False, True, False), (True, False, True), (False, False, True)):
        flags = {"INTERLEAVED": interleaved, "SAME_ANGLES": same, "HAS_PASS": has_pass}
        meta = {**flags, "BLOCK_R": 16, "HALF": 64, "BLOCK_P": 64 if has_pass else 1}
        out += [(rope._qkv_rope_fwd, meta, 1), (rope._qkv_rope_bwd, meta, 2)]
    return out


def main() -> int:
    failed = 0
    done = 0
    for kernel, constexprs, *launch in cases():
        names = [p.name for p in kernel.params]
        missing = [p.name for p in kernel.params if p.is_constexpr and p.name not in constexprs]
        options = dict(zip(("num_warps", "num_stages"), launch, strict=False))
        case = {"kernel": kernel.__name__, "constexprs": constexprs, **options}
        start = time.perf_counter()
        try:
            if missing:
                raise ValueError(f"constexprs not given: {missing}")
            source = ASTSource(
                fn=kernel,
                signature=_signature(kernel, constexprs),
                constexprs={(names.index(k),): v for k, v in constexprs.items()},
            )
            compiled = triton.compile(source, target=TARGET, options=options)
            case["ok"] = "cubin" in compiled.asm and len(compiled.asm["cubin"]) > 0
        except Exception as exc:  # noqa: BLE001  (report every kernel, not only the first failure)
            case["ok"] = False
            case["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            traceback.print_exc()
        case["seconds"] = round(time.perf_counter() - start, 2)
        failed += not case["ok"]
        done += 1
        print(json.dumps(case), flush=True)
    kernels = sorted({kernel.__name__ for kernel, *_ in cases()})
    print(json.dumps({"compiled": done, "failed": failed, "kernels": kernels}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
