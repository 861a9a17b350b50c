"""megatron-core's Transformer Engine layer spec without TE (``te/modules.py``, ``docs/te_spec.md``), MoE and MLA.

Real megatron-core 0.19.2 under ``python -m fl_patch`` (and torchrun, gloo): no mocks.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env
from ..support.ports import free_port

PROBE = REPO / "tests" / "support" / "te_spec" / "probe.py"
MEGATRON_LM = Path(os.environ.get("MEGATRON_LM", "/nonexistent"))
TE_CLASSES = {
    "TENorm", "TELinear", "TEColumnParallelLinear", "TERowParallelLinear", "TELayerNormColumnParallelLinear",
    "TEDotProductAttention", "TEColumnParallelGroupedLinear", "TERowParallelGroupedLinear",
}  # fmt: skip


def _module_level_te_names(text: str) -> set[str]:
    """TE class names a megatron module binds at module level from ``extensions.transformer_engine``."""
    names: set[str] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # upstream's own invalid escapes in some releases
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = ast.parse(text)
    for node in tree.body:
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom) and sub.module == "megatron.core.extensions.transformer_engine":
                names |= {alias.asname or alias.name for alias in sub.names} & TE_CLASSES
    return names


def _release_sources() -> list[str]:
    """Every megatron-core release at hand: the installed one, the other releases' wheels (scripts/bootstrap.sh
    downloads them; CI has them), and a Megatron-LM main tree where ``MEGATRON_LM_MAIN`` names one."""
    installed = Path(importlib.util.find_spec("megatron").submodule_search_locations[0]).parent  # type: ignore[index]
    sources = [str(installed), *(str(w) for w in sorted((REPO / ".cache" / "wheels").glob("megatron_core-*.whl")))]
    main = os.environ.get("MEGATRON_LM_MAIN")
    if main and (Path(main) / "megatron" / "core").is_dir():
        sources.append(main)
    return sources


@pytest.mark.parametrize("source", _release_sources(), ids=lambda s: Path(s).name)
def test_registered_names_are_what_each_release_binds(source: str) -> None:
    """For each release: every (module, TE name) registered for it is bound at module level there, and every
    megatron-core module that binds a TE class name is registered for it or listed as left, with why (read from
    that release's source: a module or name megatron adds, moves or renames is noticed)."""
    from fl_patch.core.gates import parse_gate
    from fl_patch.diagnostics.drift import open_source
    from fl_patch.impls.te import registry as te_registry

    release = open_source(source)
    assert release.version, source

    def binds(module: str) -> set[str]:
        path = release.module_file(f"megatron.core.{module}")
        return _module_level_te_names(release.read(path) or "") if path else set()

    pairs = [(m, n, r) for m, names, r in te_registry.TE_NAME_TARGETS for n in names]
    assert len({(m, n) for m, n, _ in pairs}) == len(pairs), "a (module, name) listed twice"
    registered: dict[str, set[str]] = {}
    for module, name, requires in pairs:
        gate = parse_gate(requires, f"{module}.{name}")
        if gate is None or gate.allows(release.version):
            registered.setdefault(module, set()).add(name)
    for module, names in registered.items():
        bound = binds(module)
        wanted = names - {"TESpecProvider"}
        assert wanted <= bound, (release.version, module, wanted - bound)
        if module != "extensions.transformer_engine_spec_provider":  # MagicMock names there: docstring
            assert bound <= wanted, (release.version, module, bound - wanted)  # a TE name left as upstream's
    binding = {
        module[len("megatron.core.") :]: names
        for module in release.modules()
        if module.startswith("megatron.core.") and (names := binds(module[len("megatron.core.") :]))
    }
    binding["extensions.transformer_engine"] = TE_CLASSES  # defines them (no import of itself)
    unaccounted = {m: n for m, n in binding.items() if m not in registered and m not in te_registry.TE_NAMES_LEFT}
    assert not unaccounted, (
        f"megatron-core {release.version}: modules binding TE classes, neither registered nor left with a reason: "
        f"{unaccounted}"
    )
    assert set(te_registry.TE_NAMES_LEFT).isdisjoint(registered)


def test_te_registry_tables_are_well_formed() -> None:
    """Every module left has a reason and is bound by some release; every class named exists in te_modules."""
    from fl_patch.diagnostics.drift import open_source
    from fl_patch.impls.te import registry as te_registry

    bound_somewhere: set[str] = {"extensions.transformer_engine"}
    for source in _release_sources():
        release = open_source(source)
        for module in te_registry.TE_NAMES_LEFT:
            path = release.module_file(f"megatron.core.{module}")
            if path and _module_level_te_names(release.read(path) or ""):
                bound_somewhere.add(module)
    # a module left only for Megatron-LM main (its reason says "(main)") is checked where a main tree is at hand
    main_only = (
        set()
        if os.environ.get("MEGATRON_LM_MAIN")
        else {m for m, reason in te_registry.TE_NAMES_LEFT.items() if reason.startswith("(main)")}
    )
    assert set(te_registry.TE_NAMES_LEFT) - bound_somewhere <= main_only, (
        set(te_registry.TE_NAMES_LEFT) - bound_somewhere
    )
    assert all(reason.strip() for reason in te_registry.TE_NAMES_LEFT.values())
    assert set(te_registry.TE_CLASS_NAMES) == TE_CLASSES
    # every class the registry names exists in te_modules (resolved without megatron's model parallel state)
    source = (REPO / "src" / "fl_patch" / "impls" / "te" / "modules.py").read_text()
    defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.ClassDef)}
    assert {name for _, names, _ in te_registry.TE_NAME_TARGETS for name in names} <= defined


def test_te_compatible_layers_take_each_releases_options(megatron_core) -> None:
    """A megatron base option a release lacks (``name`` before 0.18) is dropped when unset and refused by name
    when set; main's generalized-TP options are taken, and GTP itself is refused by name."""
    from types import SimpleNamespace

    from fl_patch.impls.te import modules as te_modules

    def base_0_17(self, input_size, output_size, *, config, tp_group=None):  # no `name`, as 0.17.1
        return None

    def base_0_18(self, input_size, output_size, *, config, tp_group=None, name=None):
        return None

    assert te_modules._release_options(base_0_17, name=None) == {}
    assert te_modules._release_options(base_0_18, name=None) == {"name": None}
    assert te_modules._release_options(base_0_18, name="decoder.layers.0.linear_qkv") == {
        "name": "decoder.layers.0.linear_qkv"
    }
    with pytest.raises(TypeError, match="base_0_17 of the installed megatron-core takes no name"):
        te_modules._release_options(base_0_17, name="decoder.layers.0.linear_qkv")
    for cls in (te_modules.TEColumnParallelLinear, te_modules.TELayerNormColumnParallelLinear,
                te_modules.TERowParallelLinear):  # fmt: skip
        assert "pg_collection" in inspect.signature(cls.__init__).parameters, cls
    assert "gtp_replica_group" in inspect.signature(te_modules.TELinear.__init__).parameters
    te_modules._refuse("TELinear", SimpleNamespace(gtp_weight_remat_size=1))  # GTP off: nothing refused
    with pytest.raises(te_modules.TEFeatureError, match="gtp_weight_remat_size=2 needs Transformer Engine"):
        te_modules._refuse("TELinear", SimpleNamespace(gtp_weight_remat_size=2))


def test_te_spec_module_tree_checkpoints_moe_mla() -> None:
    """One process: TE's module tree and checkpoint keys, the local model's losses, checkpoints TE<->local,
    MoE grouped GEMM on/off (interchangeable checkpoints), MLA with YaRN, fp8 refused by name."""
    env = clean_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", str(PROBE)], env=env, cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["classes"] == {
        "linear_qkv": "TELayerNormColumnParallelLinear",
        "core_attention": "TEDotProductAttention",
        "linear_proj": "TERowParallelLinear",
        "linear_fc1": "TELayerNormColumnParallelLinear",
        "linear_fc2": "TERowParallelLinear",
        "input_layernorm": "IdentityOp",  # fused into linear_qkv, as with TE
        # TransformerBlock's LayerNormImpl = TENorm, as with TE (TransformerBlockNorm takes the torch norm's
        # positional arguments, so the engine's signature rule accepts it).
        "final_layernorm": "_Norm",  # TENorm's module, as TE's LayerNormImpl = TENorm gives
    }
    # megatron's own local->TE name table names parameters that exist here; no separate norms remain
    assert r["megatron_te_norm_names_present"] == [True, True]
    assert r["no_separate_layer_norms"] is True
    # the dist-checkpoint keys are exactly those megatron's local spec writes under its TE names
    assert r["sharded_keys_only_te"] == [] and r["sharded_keys_only_local"] == []
    assert r["sharded_keys_equal_local_mapped"] is True
    assert r["extra_state_keys"] == 8  # 4 TE linears x 2 layers (the output layer is megatron's own, as with TE)
    assert r["param_count_equal"] is True
    assert r["same_initial_loss"] is True and r["losses_match_local"] is True and r["te_trains"] is True
    assert r["ckpt_te_to_te"] is True and r["ckpt_local_to_te"] is True and r["ckpt_te_to_local"] is True
    assert r["moe_experts_classes"] == ["SequentialMLP", "TEGroupedMLP"]
    assert r["moe_sharded_keys_equal"] is True and r["moe_seq_to_grouped_ckpt"] is True
    for name in ("moe_losses_sequential", "moe_losses_grouped", "mla_losses", "mla_moe_losses"):
        losses = r[name]
        assert losses[-1] < losses[0] - 0.3, (name, losses)
    assert r["mla_classes"] == ["TELinear", "TELinear", "TEDotProductAttention"]
    assert r["fp8"].startswith("TEFeatureError:") and "fp8='hybrid' needs Transformer Engine" in r["fp8"]


_PLUGIN_NORM = """
import json, logging, os, torch
import torch.nn.functional as F
import fl_patch

calls = []

def my_norm(x, weight, bias, eps, rms, zero_centered_gamma):  # the signature te.modules.norm has always had
    calls.append(tuple(x.shape))
    gamma = weight + 1 if zero_centered_gamma else weight
    return F.rms_norm(x, (x.shape[-1],), gamma, eps) if rms else F.layer_norm(x, (x.shape[-1],), gamma, bias, eps)

records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger("fl_patch").addHandler(handler)
fl_patch.register(target="fl_patch.impls.te.modules.norm", impl=my_norm, vendor="myvendor")
fl_patch.install()
torch.distributed.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"], rank=0, world_size=1)
from megatron.core import parallel_state
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
from megatron.core.transformer.transformer_config import TransformerConfig

parallel_state.initialize_model_parallel(1, 1)
model_parallel_cuda_manual_seed(1)
config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128,
                           normalization="RMSNorm", use_cpu_initialization=True, hidden_dropout=0.0,
                           attention_dropout=0.0)
model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(), vocab_size=128,
                 max_sequence_length=16)
tokens = torch.randint(0, 128, (2, 16))
model(tokens, torch.arange(16).expand(2, 16), None).sum().backward()
print(json.dumps({"calls": len(calls), "problems": [r.getMessage() for r in records if r.levelno >= logging.WARNING
                                                    and "norm" in r.getMessage()]}))
"""


def test_a_plugins_own_norm_takes_the_layer_norm_linears_calls() -> None:
    """A plugin's ``te.modules.norm`` with the signature it has always had is accepted without a word and runs for
    every norm of the TE spec: the two ``TELayerNormColumnParallelLinear`` of each layer (which normalize through
    ``linear_input_norm``, the hook the GPU pack's fp8 replaces) and the final norm."""
    env = clean_env(MG_FL_PREFER="myvendor", PORT=str(free_port()))
    proc = subprocess.run(
        [sys.executable, "-c", _PLUGIN_NORM], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"calls": 2 * 2 + 1, "problems": []}, (out, proc.stderr[-3000:])


_NEEDS_MEGATRON_LM = pytest.mark.skipif(
    not (MEGATRON_LM / "pretrain_gpt.py").is_file(),
    reason="set MEGATRON_LM to a Megatron-LM checkout (core_v0.19.0) to run pretrain_gpt.py",
)
# Megatron-LM's pretrain_gpt.py flags of every run here: a tiny GPT on mock data, 8 iterations.
_PRETRAIN_BASE = (
    "--mock-data --tokenizer-type NullTokenizer --vocab-size 128 --make-vocab-size-divisible-by 64 "
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
    "--micro-batch-size 2 --global-batch-size 4 --train-iters 8 --lr 1e-3 --log-interval 1 "
    "--eval-interval 8 --eval-iters 1 --num-workers 0 --position-embedding-type rope --normalization RMSNorm "
    "--swiglu --disable-bias-linear"
).split()
_TORCHRUN_2 = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _pretrain_losses(where: Path, launcher: list[str], args: list[str], **env: str) -> list[float]:
    """Upstream pretrain_gpt.py, unchanged, under ``python -m fl_patch [launcher]``: its 8 logged lm losses."""
    for name in ("pretrain_gpt.py", "gpt_builders.py", "model_provider.py"):
        if not (where / name).exists():
            shutil.copy(MEGATRON_LM / name, where / name)
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", *launcher, "pretrain_gpt.py", *_PRETRAIN_BASE, *args],
        env=clean_env(**env), cwd=where, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    losses = [float(line.split("lm loss:")[1].split("|")[0]) for line in log.splitlines() if "| lm loss:" in line]
    assert len(losses) == 8, log[-3000:]
    return losses


@pytest.mark.slow
@_NEEDS_MEGATRON_LM
@pytest.mark.parametrize("grouped", [False, True], ids=["sequential-experts", "grouped-gemm"])
def test_pretrain_gpt_te_spec_moe_ep2_mla(tmp_path: Path, grouped: bool) -> None:
    """Megatron-LM's pretrain_gpt.py, unchanged, torchrun 2 ranks: the default TE impl, 4 experts top-2, alltoall,
    EP=2, multi-latent attention (q/kv LoRA, YaRN), grouped GEMM off and on: it trains."""
    args = (
        "--num-experts 4 --moe-router-topk 2 --moe-token-dispatcher-type alltoall --expert-model-parallel-size 2 "
        "--moe-ffn-hidden-size 64 "
        "--multi-latent-attention --q-lora-rank 32 --kv-lora-rank 32 --qk-head-dim 16 --qk-pos-emb-head-dim 16 "
        "--v-head-dim 16 --rotary-scaling-factor 2"
    ).split() + (["--moe-grouped-gemm"] if grouped else [])
    losses = _pretrain_losses(tmp_path, _TORCHRUN_2, args)
    assert losses[-1] < losses[0] - 0.1, losses


@_NEEDS_MEGATRON_LM
def test_pretrain_gpt_te_spec_tp2_sequence_parallel_matches_one_rank(tmp_path: Path) -> None:
    """The TE spec (default impl, no TE) at TP=2 with sequence parallelism, torchrun 2 ranks, computes the
    losses of one rank: CPU initialisation from the seed and no dropout, so the sharded layers see the
    same weights and the tensor-parallel collectives (gloo) are the only difference."""
    same = "--seed 1234 --use-cpu-initialization --attention-dropout 0 --hidden-dropout 0".split()
    one_rank = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    one = _pretrain_losses(tmp_path, [], same, **one_rank)
    tp2 = _pretrain_losses(tmp_path, _TORCHRUN_2, [*same, "--tensor-model-parallel-size", "2", "--sequence-parallel"])
    assert tp2 == pytest.approx(one, rel=1e-5)
    assert one[-1] < one[0] - 0.1, one
