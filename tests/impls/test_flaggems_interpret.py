"""The FlagGems pack's own Triton kernels on a CPU, in Triton's interpreter (``TRITON_INTERPRET=1``).

Triton is not in the project's venv (with it importable, megatron-core and torch
take their Triton paths in every test). ``scripts/triton-cpu.sh`` installs it into
``.cache/triton-cpu``; these tests put that folder on the PYTHONPATH of a
subprocess and skip when it is absent. Small sizes: the interpreter runs each
program in numpy. Checks that need no process of their own share one
(``tests/support/flaggems/gems_parts.py``, a module fixture each): the kernel
checks, the host-side tuning checks, the checks inside megatron-core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..conftest import REPO, SUPPORT, TRITON_CPU, triton_env

pytestmark = pytest.mark.skipif(
    not (TRITON_CPU / "triton").is_dir(), reason="no .cache/triton-cpu (run scripts/triton-cpu.sh)"
)


def _env(**extra: str) -> dict[str, str]:
    return triton_env(interpret=True, **extra)


def _results(stdout: str) -> tuple[list[dict], dict]:
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [r for r in lines if "id" in r], lines[-1]


def _failures(cases: list[dict]) -> list[str]:
    return [f"{c['id']}: {c['problems']}" for c in cases if c["problems"]]


def _run_parts(parts: list[dict], env: dict[str, str], timeout: float) -> dict[str, dict]:
    """Run ``parts`` one after another in one process (``gems_parts.py``); each part's result by its name: its
    ``exit`` status, ``stdout`` and ``error``, and ``why`` (its traceback, its output, the process's stderr)."""
    proc = subprocess.run(
        [sys.executable, str(SUPPORT / "flaggems" / "gems_parts.py"), json.dumps(parts)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    done = {r["name"]: r for r in (json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"name": '))}
    results = {}
    for part in parts:  # a part that never reported: the process died in it (or before)
        r = done.get(part["name"]) or {"exit": None, "stdout": "", "error": f"no result: exit {proc.returncode}"}
        why = f"{r['error'] or ''}\n{r['stdout'][-2000:]}\n{proc.stderr[-4000:]}"
        results[part["name"]] = {**r, "why": why}
    return results


# the attention kernels with another block-shape relation than the shipped one
_BLOCKS = {
    "square-blocks": {"fwd": [16, 16, 4, 1], "dq": [16, 16, 4, 1], "dkdv": [16, 16, 4, 1]},  # BLOCK_M == BLOCK_N
    "wide-blocks": {"fwd": [64, 16, 4, 1], "dq": [64, 32, 4, 1], "dkdv": [16, 64, 4, 1]},  # blocks past the sequence
}


@pytest.fixture(scope="module")
def kernel_checks() -> dict[str, dict]:
    """One interpreter process: every kernel case (``gems_checks.py interpret``), the attention cases again with
    each of ``_BLOCKS`` (the shipped blocks restored after each), the norms' weight-gradient reduction."""
    checks = str(SUPPORT / "flaggems" / "gems_checks.py")
    parts = [
        {"name": "checks", "script": checks, "argv": ["interpret"]},
        *({"name": name, "script": checks, "argv": ["interpret", json.dumps(b)]} for name, b in _BLOCKS.items()),
        {"name": "reduce", "code": _REDUCE_SNIPPET},
    ]
    return _run_parts(parts, _env(), timeout=600)


@pytest.fixture(scope="module")
def host_side(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """One process without the interpreter: the tuning store, the borrowed picks (each its own cache folder),
    the host grid helpers, the shipped seeds."""
    parts = [
        {"name": "store", "code": _STORE_SNIPPET, "env": {"FL_GEMS_CACHE_DIR": str(tmp_path_factory.mktemp("store"))}},
        {"name": "borrow", "code": _BORROW_SNIPPET, "env": {"FL_GEMS_CACHE_DIR": str(tmp_path_factory.mktemp("bor"))}},
        {"name": "host_helpers", "code": _HOST_HELPERS_SNIPPET},
        {"name": "seeds", "code": _SEEDS_SNIPPET},
    ]
    return _run_parts(parts, triton_env(interpret=False), timeout=300)


@pytest.fixture(scope="module")
def in_megatron() -> dict[str, dict]:
    """One interpreter process under MG_FL_PREFER=flaggems, fl_patch installed before megatron is imported: the
    pack in megatron-core (its log checked first), then TE's spec on it, then TE's fused RoPE name."""
    parts = [
        {"name": "megatron", "script": str(SUPPORT / "flaggems" / "gems_megatron_interpret.py")},
        {"name": "te_spec", "script": str(SUPPORT / "flaggems" / "gems_te_interpret.py")},
        {"name": "rope_fusion", "code": _ROPE_FUSION},
    ]
    return _run_parts(parts, _env(MG_FL_PREFER="flaggems", GEMS_PORT=str(29500 + os.getpid() % 400)), timeout=900)


def test_every_kernel_forward_and_backward_against_torch_autograd(kernel_checks) -> None:
    part = kernel_checks["checks"]
    cases, summary = _results(part["stdout"])
    assert part["exit"] == 0 and not _failures(cases), _failures(cases) or part["why"]
    ops = {c["id"].split("[")[0] for c in cases}
    assert ops == {
        "rms_norm", "layer_norm", "swiglu", "rope", "qkv_rope", "attention", "softmax", "cross_entropy",
        "moe_permute", "moe_unpermute", "moe_sort_chunks", "moe_row_map",
    }  # fmt: skip
    assert summary == {"cases": len(cases), "failed": 0} and len(cases) == 52


@pytest.mark.parametrize("blocks", list(_BLOCKS))
def test_attention_with_other_block_shapes(kernel_checks, blocks) -> None:
    part = kernel_checks[blocks]
    cases, _ = _results(part["stdout"])
    assert part["exit"] == 0 and len(cases) == 4 and not _failures(cases), _failures(cases) or part["why"]


def test_pack_inside_real_megatron_core(in_megatron) -> None:
    """Every target applied; impls equal upstream (or float64) forward and backward; fallback said once."""
    part = in_megatron["megatron"]
    assert part["exit"] == 0, part["why"]
    result = json.loads(part["stdout"].strip().splitlines()[-1])
    # the pack's registry (tests/impls/test_flaggems.py counts them): 9 op patches, 7 optimizer patches, 1 created
    # name, 2 for gradient accumulation fusion without Apex
    assert result["ok"] and len(result["targets"]) == 19


def test_te_spec_on_the_pack_inside_real_megatron_core(in_megatron) -> None:
    """megatron's TE layer spec without TE, under MG_FL_PREFER=flaggems: TE's module tree, its norms, attention
    and (MoE) weighted SwiGLU on the pack's kernels, loss and every gradient equal to the replaced functions'."""
    part = in_megatron["te_spec"]
    assert part["exit"] == 0, part["why"]
    result = json.loads(part["stdout"].strip().splitlines()[-1])
    assert result["ok"]
    for case in ("dense_rmsnorm", "layernorm_zero_centered", "moe_grouped"):
        assert result[case]["worst_grad_rel"] < 1e-4 and result[case]["loss_diff"] < 1e-5, result[case]


_REDUCE_SNIPPET = """
import json, torch
from fl_patch.impls.flaggems.kernels.norms import _reduce_parts
torch.manual_seed(0)
out = []
for parts, width, used in ((1500, 37, 1500), (528, 70, 300), (3, 5, 1)):
    a = torch.randn(parts, width)
    b = torch.randn(parts, width)
    dw, db = _reduce_parts(a, used, torch.bfloat16, b)
    (dw_only, none) = _reduce_parts(a, used, torch.float32)
    ref_a, ref_b = a[:used].double().sum(0), b[:used].double().sum(0)
    # fp32 summation error bound of a tree (within a load) plus a few trips: (log2(1024) + 6) eps sum|a|
    bound = (16 * 2.0**-24 * a[:used].double().abs().sum(0))
    out.append({
        "dw": (dw.double() - ref_a).abs().max().item() / ref_a.abs().max().item(),
        "db": (db.double() - ref_b).abs().max().item() / ref_b.abs().max().item(),
        "fp32_over_bound": ((dw_only.double() - ref_a).abs() / bound).max().item(),
        "dtype": str(dw.dtype), "none": none is None,
    })
print(json.dumps(out))
"""


def test_norm_weight_gradient_reduction_over_many_partial_rows(kernel_checks) -> None:
    # More partial rows than one load holds (1500 > 1024: two trips), fewer rows used
    # than allocated, a width that is no multiple of the column block, dw and db in one launch.
    part = kernel_checks["reduce"]
    assert part["exit"] == 0, part["why"]
    results = json.loads(part["stdout"].strip().splitlines()[-1])
    assert len(results) == 3
    for r in results:
        assert r["dtype"] == "torch.bfloat16" and r["none"]
        # bf16 rounding of the sum: under 2**-7 relative (triton 3.6's interpreter truncates fp32 to
        # bf16, seen here: 1 + 2**-8 + 2**-12 became 1.0; torch and the GPU round to nearest)
        assert r["dw"] < 8e-3 and r["db"] < 8e-3
        assert r["fp32_over_bound"] <= 1.0


_STORE_SNIPPET = """
import json, os
from fl_patch.impls.flaggems.kernels import TuneStore, norms

class Tuner:  # what TuneStore reads of a triton autotuner: its kernel, its configs, its key -> config cache
    def __init__(self, real, configs=None):
        self.fn, self.configs, self.cache = real.fn, list(configs or real.configs), {}

real = norms._RMS_BWD
device = "Some GPU-sm99-triton3.6.0"  # a family no shipped seed file is for (seeds are read by SM family)
a = Tuner(real)
a.cache[(2048, 8192, "torch.bfloat16", "torch.float32")] = real.configs[5]
TuneStore(device).save(a)
b = Tuner(real)
b.cache[(4096, 16384, "torch.bfloat16", "torch.float32")] = real.configs[7]
TuneStore(device).save(b)  # merges with a's pick
fresh = Tuner(real)
loaded = TuneStore(device).load(fresh)
again, tuner = TuneStore(device), Tuner(real)
twice = [again.load(tuner), again.load(tuner)]  # once per tuner a process
fewer = Tuner(real, real.configs[:5])  # another config list: another kernel id, nothing loaded
n_fewer = TuneStore(device).load(fewer)
path = TuneStore(device).path()
data = json.load(open(path))
(kernel_id,) = data
data[kernel_id].append([[1, 2], {"kwargs": {"BLOCK_M": 999}, "num_warps": 4, "num_stages": 3}])  # not a config
with open(path, "w") as f:
    json.dump(data, f)
n_stale = TuneStore(device).load(Tuner(real))
# a shipped seed: read after the user's file, whose pick wins for the same key
seed_dir = os.path.join(os.environ["FL_GEMS_CACHE_DIR"], "seed")
os.makedirs(seed_dir)
user_key, other_key = [2048, 8192, "torch.bfloat16", "torch.float32"], [64, 64, "torch.bfloat16", "torch.float32"]
seed = {kernel_id: [[user_key, TuneStore._config_dict(real.configs[0])], [other_key, TuneStore._config_dict(real.configs[2])]]}
with open(os.path.join(seed_dir, TuneStore(device).file_name()), "w") as f:
    json.dump(seed, f)
seeded = Tuner(real)
n_seeded = TuneStore(device, seed_dir).load(seeded)
seed_wins = [seeded.cache[tuple(user_key)] is real.configs[5], seeded.cache[tuple(other_key)] is real.configs[2]]
os.environ["FL_GEMS_AUTOTUNE_SEED"] = "0"
n_no_seed = TuneStore(device, seed_dir).load(Tuner(real))
os.environ["FL_GEMS_AUTOTUNE_CACHE"] = "0"
n_off = TuneStore(device).load(Tuner(real))
print(json.dumps({
    "loaded": loaded, "twice": twice, "fewer": n_fewer, "stale": n_stale, "off": n_off, "same": [fresh.cache.get(k) is c for k, c in {**a.cache, **b.cache}.items()],
    "file": os.path.basename(path), "ids": [TuneStore.kernel_id(fewer) != kernel_id],
    "seeded": n_seeded, "seed_wins": seed_wins, "no_seed": n_no_seed,
}))
"""


def test_autotune_store_keeps_picks_by_kernel_source_and_configs(host_side) -> None:
    """Picks written by one process load in another; another config list, a pick that is no config, or the
    store turned off load nothing; shipped seeds fill in after the user's picks. (The GPU test runs the
    real tuner across two processes.)"""
    part = host_side["store"]
    assert part["exit"] == 0, part["why"]
    out = json.loads(part["stdout"].strip().splitlines()[-1])
    assert out == {
        "loaded": 2, "twice": [2, 0], "fewer": 0, "stale": 2, "off": 0, "same": [True, True],
        "file": "autotune-Some_GPU-sm99-triton3.6.0.json", "ids": [True],
        "seeded": 4, "seed_wins": [True, True], "no_seed": 2,
    }  # fmt: skip


def test_pack_at_tensor_parallel_two_with_and_without_sequence_parallel(run_python, tmp_path) -> None:
    """TP=2 under gloo (torchrun, two ranks): the pack's kernels (norms, SwiGLU, RoPE, attention, and the
    vocabulary-parallel cross entropy) give upstream TP=2's losses, gradient shards and updated parameters;
    with sequence parallelism (upstream's torch norms refuse it) too, the norm weights marked for megatron's
    all-reduce of their gradients. (The two pack modes share one job: the same patches; each builds its own model
    from the same seeds. Upstream's vendors are chosen at import: a job of its own, run first; the pack's job
    compares each rank's shards with upstream's files.)"""
    runs, compared = {}, {}
    for modes in ("upstream", "pack,pack_sp"):
        extra = {"GEMS_TP_MODE": modes, "GEMS_TP_OUT": str(tmp_path)}
        if modes != "upstream":
            extra.update(MG_FL_PREFER="flaggems", GEMS_TP_AGAINST="upstream")
        proc = run_python(
            "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(SUPPORT / "flaggems" / "gems_tp_interpret.py"),
            env=_env(**extra), check=False, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        assert [line["mode"] for line in lines if "mode" in line] == modes.split(","), proc.stdout[-2000:]
        runs.update((line["mode"], line) for line in lines if "mode" in line)
        compared.update(c for line in lines for c in line.get("compared", {}).items())
    every_op = {"rms_norm": 10, "rotary": 8, "flash_attention": 4, "swiglu": 4, "vocab_parallel_cross_entropy": 2}
    for mode in ("pack", "pack_sp"):
        assert runs[mode]["calls"] == every_op and runs[mode]["fallbacks"] == [], runs[mode]
        assert "FusedAdam" in runs[mode]["optimizer_mro"], runs[mode]
    assert runs["upstream"]["calls"] == {} and runs["upstream"]["sequence_parallel_params"] == []
    assert runs["pack_sp"]["sequence_parallel_params"] == [
        "decoder.final_layernorm.weight",
        *(f"decoder.layers.{i}.{n}_layernorm.weight" for i in (0, 1) for n in ("input", "pre_mlp")),
    ]
    assert sorted(compared) == [f"{mode}_rank{rank}" for mode in ("pack", "pack_sp") for rank in (0, 1)], compared
    for key, c in compared.items():
        # fp32: other summation orders in the kernels; Adam's update amplifies it on near-zero gradients
        assert c["names"] and c["loss"] <= 1e-6 and c["grad"] <= 1e-5 and c["param"] <= 1e-4, (key, c)


_HOST_HELPERS_SNIPPET = """
import triton
from fl_patch.impls.flaggems import kernels
sizes = [*range(0, 4200), 32000, 32768, 65537, 2**31 - 1, 2**31, 2**40 + 3]
bad = [n for n in sizes if kernels.next_power_of_2(n) != triton.next_power_of_2(n)]
bad += [(n, d) for n in sizes for d in (1, 7, 16, 64, 128) if kernels.cdiv(n, d) != triton.cdiv(n, d)]
print(bad[:10])
"""


def test_host_grid_helpers_compute_what_triton_s_compute(host_side) -> None:
    """The host code's plain-int cdiv / next_power_of_2 (triton 3.6's are slow constexpr functions)
    give triton's results: every grid and block size the kernels are launched with depends on them."""
    part = host_side["host_helpers"]
    assert part["exit"] == 0, part["why"]
    assert part["stdout"].strip().splitlines()[-1] == "[]", part["stdout"][-2000:]


_BORROW_SNIPPET = """
import json, os, torch
from fl_patch.impls.flaggems.kernels import TuneStore, autotune_key, norms

real = norms._RMS_BWD

class Tuner:  # what launch() and TuneStore read of a triton autotuner
    def __init__(self):
        self.fn, self.configs, self.cache = real.fn, list(real.configs), {}
        self.arg_names, self.keys = ["X", "DY", "N_ROWS", "N_COLS", "FLAG"], ["N_ROWS", "N_COLS", "FLAG"]

x, dy = torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2, dtype=torch.float32)
device = "Some GPU-sm99-triton3.6.0"  # a family no shipped seed file is for (seeds are read by SM family)
store, tuner = TuneStore(device), Tuner()
measured = {(4096, 2048, True, "torch.bfloat16", "torch.float32"): real.configs[3],
            (4096, 8192, True, "torch.bfloat16", "torch.float32"): real.configs[6],
            (4096, 2560, False, "torch.bfloat16", "torch.float32"): real.configs[1]}  # another flag: not comparable
tuner.cache.update(measured)
key = autotune_key(tuner, (x, dy, 4096), {"N_COLS": 2600, "FLAG": True})
borrowed = store.borrow_nearest(tuner, (x, dy, 4096), {"N_COLS": 2600, "FLAG": True})
again = store.borrow_nearest(tuner, (x, dy, 4096), {"N_COLS": 2600, "FLAG": True})  # now in the cache
other = autotune_key(tuner, (x, dy.to(torch.bfloat16), 4096), {"N_COLS": 2600, "FLAG": True})
no_form = store.borrow_nearest(tuner, (x, dy.to(torch.bfloat16), 4096), {"N_COLS": 2600, "FLAG": True})
store.save(tuner)
saved = json.load(open(store.path()))[TuneStore.kernel_id(tuner)]
print(json.dumps({
    "key": list(key), "borrowed": borrowed, "again": again, "pick": tuner.cache[key] is real.configs[3],
    "no_form": no_form, "other_cached": other in tuner.cache, "saved": sorted(k[1] for k, _ in saved),
    "not_a_tuner": autotune_key(object(), (), {}),
}))
"""


def test_an_unseen_shape_borrows_the_nearest_measured_pick_instead_of_tuning(host_side) -> None:
    """Issue 28's cold start: a shape with no stored pick takes the pick of the nearest stored shape of the
    same form (dtypes and flags equal; sizes nearest on a log scale), is not tuned on the first step, and the
    borrowed pick is never saved as if measured. (tests/impls/test_flaggems_gpu.py checks it on the real tuner.)"""
    part = host_side["borrow"]
    assert part["exit"] == 0, part["why"]
    out = json.loads(part["stdout"].strip().splitlines()[-1])
    assert out == {
        "key": [4096, 2600, True, "torch.bfloat16", "torch.float32"], "borrowed": True, "again": False,
        "pick": True, "no_form": False, "other_cached": False, "saved": [2048, 2560, 8192], "not_a_tuner": None,
    }  # fmt: skip


_SEEDS_SNIPPET = """
import glob, importlib, json, os, pkgutil
import fl_patch.impls.flaggems.kernels as kernels
from fl_patch.impls.flaggems.kernels import TuneStore

current = {}
for info in pkgutil.iter_modules(kernels.__path__):
    module = importlib.import_module(f"{kernels.__name__}.{info.name}")
    for name, obj in vars(module).items():
        if hasattr(obj, "configs") and hasattr(obj, "keys") and hasattr(obj, "fn"):  # a triton autotuner
            current[TuneStore.kernel_id(obj)] = f"{info.name}.{name}"
seeds = {}
folder = os.path.join(os.path.dirname(kernels.__file__), "..", "tuned")
for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
    seeds[os.path.basename(path)] = sorted(json.load(open(path)))
print(json.dumps({"current": current, "seeds": seeds}))
"""


def test_every_shipped_seed_names_a_kernel_as_it_is_now(host_side) -> None:
    """The tuning seeds (``flaggems/tuned/*.json``) are keyed by each kernel's source and config list: a kernel whose
    source changed is tuned again from nothing on every new machine, its seed silently dead (the SwiGLU kernels'
    were, after a refactor that changed no compiled code: 14 configs tuned on an H100's first step). Every entry of
    every shipped seed file must name an autotuned kernel of the pack as it is now; a change to a seeded kernel
    re-keys its entries (same compiled code) or re-tunes them on a GPU."""
    part = host_side["seeds"]
    assert part["exit"] == 0, part["why"]
    out = json.loads(part["stdout"].strip().splitlines()[-1])
    assert out["seeds"], "no seed file shipped"
    for file, kernel_ids in out["seeds"].items():
        stale = [k for k in kernel_ids if k not in out["current"]]
        assert not stale, (file, stale, sorted(out["current"].values()))


OTHER_THAN_MOE = (
    "fl_patch.impls.te.modules.norm",
    "fl_patch.impls.te.modules.attention",
    "megatron.core.tensor_parallel.cross_entropy.vocab_parallel_cross_entropy",
    "megatron.core.fusions.fused_bias_swiglu.weighted_bias_swiglu_impl",
)


def test_moe_permutation_kernels_inside_real_megatron_core(run_python) -> None:
    """--moe-permute-fusion under MG_FL_PREFER=flaggems: megatron's fused permute/unpermute move the tokens on the
    pack's kernels (counted, no fallback) and give megatron's unfused results on generated routings; a MoE GPT
    trains identically with the fusions on and off, on each dispatcher (alltoall, with its per-expert chunk sort,
    and allgather). bf16 sums get a bf16 bound here: Triton's interpreter casts fp32 to bf16 by truncation
    (numpy), the GPU rounds to nearest (the GPU tests hold the kernels to torch's error there). The GPT has one
    MoE layer here (two in test_te_moe_fusions.py, without the interpreter): each step's dispatch and combine go
    through the kernels forward and backward in it, as in every further layer. Its experts are sequential here:
    the experts' GEMM form moves no token (the dispatchers call the permutation whichever it is), and
    test_te_moe_fusions.py trains grouped experts too, on and off, with the same assertion. The pack's other kernels
    (attention, norms, cross entropy: test_pack_inside_real_megatron_core runs them in megatron) are left out here
    with the users' switch, FL_PATCH_DISABLE: in the interpreter they cost a sixth of this test and touch no row
    the permutation moves."""
    others = ",".join(OTHER_THAN_MOE)
    env = _env(MG_FL_PREFER="flaggems", PERMUTE_KERNELS="1", MOE_FUSION_CASES="30", MOE_TRAIN_LAYERS="1",
               MOE_TRAIN_GEMMS="sequential", FL_PATCH_DISABLE=others)  # fmt: skip
    proc = run_python("-m", "fl_patch", str(SUPPORT / "moe_fusions" / "probe.py"), str(29990 - os.getpid() % 90),
                      env=env, check=False, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["calls"]["permute_rows"] > 100 and r["calls"]["unpermute_rows"] > 50, r["calls"]
    assert not [f for f in r["fallbacks"] if f.startswith("moe_")], r["fallbacks"]
    assert set(r["disabled"]) == set(OTHER_THAN_MOE), r["disabled"]  # the switch took those, and nothing else
    for key in ("permute", "permuted_probs", "truncated", "drop_and_pad"):
        assert r["fp32"][key] == 0.0 and r["bf16"][key] == 0.0, (key, r["fp32"], r["bf16"])
    for key in ("permute_grad_x", "permute_grad_probs", "unpermute_grad", "unpermute_grad_probs"):
        assert r["fp32"][key] <= 1e-6 and r["bf16"][key] <= 2**-7, (key, r["fp32"], r["bf16"])
    assert r["fp32"]["unpermute_excess_error"] <= 1e-7 and r["bf16"]["unpermute_excess_error"] <= 2**-8, r
    chunks = r["sort_chunks"]  # the alltoall dispatcher's regrouping, on the pack's chunk kernel
    assert chunks["cases"] == 30 and chunks["sort_chunks"] == chunks["sort_chunks_probs"] == 0.0, chunks
    assert chunks["sort_chunks_grad"] == 0.0, chunks
    assert set(r["trained"]) == {"alltoall_sequential", "allgather_sequential"}, r["trained"]
    assert all(run["max_diff"] <= 1e-6 for run in r["trained"].values()), r["trained"]


_ROPE_FUSION = """
import json, fl_patch
fl_patch.install()
import torch
from megatron.core.models.common.embeddings import rope_utils
from megatron.core.transformer.transformer_config import TransformerConfig

def config(fused):
    return TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, apply_rope_fusion=fused,
                             use_cpu_initialization=True)

if not torch.distributed.is_initialized():  # (in_megatron runs it after the other checks, in one process)
    torch.distributed.init_process_group(
        "gloo", init_method="tcp://127.0.0.1:" + __import__("os").environ["GEMS_PORT"], rank=0, world_size=1)
out = {"kernel_code": rope_utils.fused_apply_rotary_pos_emb.__code__.co_filename.endswith("flaggems/rope.py")}
torch.manual_seed(0)
for interleaved in (False, True):
    t = torch.randn(12, 2, 4, 16, requires_grad=True)
    freqs = torch.randn(16, 1, 1, 8)  # longer than the sequence, a rotary part narrower than the head, as megatron's
    dy = torch.randn(12, 2, 4, 16)
    if interleaved:  # TransformerConfig takes rotary_interleaved with fusion only from TE 2.3: the function itself
        fused = rope_utils.fused_apply_rotary_pos_emb(t, freqs, interleaved=True)
    else:  # through megatron's own call, the config accepted
        fused = rope_utils.apply_rotary_pos_emb(t, freqs, config(True), cp_group=torch.distributed.group.WORLD)
    (gf,) = torch.autograd.grad(fused, t, dy)
    plain = fl_patch.original(
        "megatron.core.models.common.embeddings.rope_utils._apply_rotary_pos_emb_bshd")(t, freqs[:12], interleaved)
    (gp,) = torch.autograd.grad(plain, t, dy)
    out[str(interleaved)] = [(fused - plain).abs().max().item(), (gf - gp).abs().max().item()]
print(json.dumps(out))
"""


def test_te_fused_rope_is_served_on_the_kernel_and_computes_upstreams_rope(in_megatron) -> None:
    """apply_rope_fusion=True (Megatron-LM's default) without TE: TransformerConfig takes it, and TE's fused RoPE name
    runs the pack's kernel, equal forward and backward to upstream's unfused bshd RoPE (plain and interleaved)."""
    part = in_megatron["rope_fusion"]
    assert part["exit"] == 0, part["why"]
    out = json.loads(part["stdout"].strip().splitlines()[-1])
    assert out["kernel_code"], out
    for interleaved in ("False", "True"):
        assert max(out[interleaved]) < 1e-5, out
