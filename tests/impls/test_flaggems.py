"""The FlagGems pack on a machine without GPU or triton: registration, vendor choice, fallbacks.

The kernels themselves are tested in Triton's CPU interpreter
(``tests/impls/test_flaggems_interpret.py``) and on a GPU (``tests/impls/test_flaggems_gpu.py``); here the
pack must cost nothing where it is not chosen, take its targets where it is, and
hand every call it cannot run back to upstream, saying so once.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

import fl_patch
from fl_patch import Status
from fl_patch.core.vendors import vendor_priority
from fl_patch.impls.flaggems import _runtime

from ..conftest import SUPPORT, clean_env

NORM = "megatron.core.transformer.torch_norm.WrappedTorchNorm"


def test_registry_imports_no_torch_triton_flag_gems_or_megatron(run_python) -> None:
    code = (
        "import sys, json, fl_patch; import fl_patch.impls.flaggems.registry as r; r.register_pack(); "
        "from fl_patch.runtime import RUNTIME; "
        "print(json.dumps({'heavy': sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'triton', 'flag_gems', 'megatron')), 'n': len(RUNTIME.registry.registrations())}))"
    )
    out = json.loads(run_python("-c", code).stdout)
    # 9 op patches, 1 created name, 4 optimizer patches; 19 for the TE spec on the kernels and fp8 (no TE here),
    # 2 for TE's fused RoPE (apply_rope_fusion=True);
    # the shared packs for vendor flaggems: te 58, without_te 5 (the distributed optimizer's 3, wgrad fusion's 2);
    # the wheel's compile_helpers (pretrain_gpt.py exits at start-up without it on a GPU machine too)
    assert out == {"heavy": [], "n": 9 + 1 + 4 + 19 + 2 + 58 + 5 + 1}


def test_flaggems_first_then_the_detected_platform() -> None:
    # MG_FL_PREFER=flaggems on a GPU machine: the pack, then any cuda impl, then upstream
    assert vendor_priority(("flaggems",), "cuda") == ("flaggems", "cuda", "default")
    assert vendor_priority(("flaggems",), "cpu") == ("flaggems", "cpu", "default")


@pytest.fixture
def pack(megatron_core, engine, monkeypatch: pytest.MonkeyPatch):
    """The pack's registrations (FL_PATCH_PACKS=none keeps the shipped registry out of the engine fixture)."""
    from fl_patch.impls.flaggems.registry import CREATED, FLAGGEMS, PATCHES

    for target, impl, _doc in PATCHES:
        fl_patch.register(target, impl, vendor=FLAGGEMS)
    for target, impl, _doc in CREATED:
        fl_patch.register(target, impl, vendor=FLAGGEMS, create=True)
    _runtime.reset_fallbacks()
    yield PATCHES + CREATED
    _runtime.reset_fallbacks()


def _record(target: str) -> fl_patch.PatchRecord:
    (record,) = [r for r in fl_patch.report() if r.target == target and r.vendor == "flaggems"]
    return record


def test_not_chosen_without_mg_fl_prefer(pack) -> None:
    from megatron.core.transformer import torch_norm

    fl_patch.install()
    assert _record(NORM).status is Status.OTHER_VENDOR
    config = _config()
    assert type(torch_norm.WrappedTorchNorm(config=config, hidden_size=16)) is torch.nn.RMSNorm


def _config():
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(num_layers=1, hidden_size=16, num_attention_heads=2, normalization="RMSNorm")


def test_chosen_with_mg_fl_prefer_and_cpu_tensors_run_upstream_said_once(
    pack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from megatron.core.transformer import torch_norm
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    from fl_patch.impls.flaggems import norm

    monkeypatch.setenv("MG_FL_PREFER", "flaggems")
    fl_patch.install()
    for target, *_ in pack:
        record = _record(target)
        assert record.status in (Status.APPLIED, Status.WAITING), (target, record.status, record.detail)
    assert _record(NORM).status is Status.APPLIED
    assert DotProductAttention.forward.__code__.co_filename.endswith("fl_patch/impls/flaggems/attention.py")

    module = torch_norm.WrappedTorchNorm(config=_config(), hidden_size=16, eps=1e-5)
    assert type(module) is norm.FlagGemsRMSNorm
    x = torch.randn(3, 16)
    with caplog.at_level(logging.WARNING, logger="fl_patch.flaggems"):
        for _ in range(3):
            assert torch.equal(module(x), torch.nn.functional.rms_norm(x, (16,), module.weight, 1e-5))
    assert _runtime.FALLBACKS == {("rms_norm", "input on cpu (the kernels need CUDA)"): 3}
    assert [r.getMessage() for r in caplog.records if "rms_norm" in r.getMessage()] == [
        "fl_patch flaggems: rms_norm runs upstream megatron-core: input on cpu (the kernels need CUDA) (logged once)"
    ]

    fl_patch.uninstall()
    assert type(torch_norm.WrappedTorchNorm(config=_config(), hidden_size=16)) is torch.nn.RMSNorm


def test_pack_on_a_cpu_machine_end_to_end(run_python) -> None:
    """``MG_FL_PREFER=flaggems`` on a CPU: flaggems, then the cpu pack (megatron imports), then upstream."""
    code = (
        "import json, fl_patch; fl_patch.install()\n"
        "from fl_patch.runtime import RUNTIME\n"
        "import megatron.core, torch\n"
        "from megatron.core.models.common.embeddings import rope_utils\n"
        "print(json.dumps({'vendors': RUNTIME.engine.vendors(), 'status': {r.target.rsplit('.', 1)[-1]: "
        "r.status.value for r in fl_patch.report() if r.chosen_vendor == r.vendor}}))\n"
    )
    out = json.loads(run_python("-c", code, env=clean_env(MG_FL_PREFER="flaggems")).stdout.splitlines()[-1])
    assert out["vendors"] == ["flaggems", "cpu", "default"]
    assert out["status"]["apply_rotary_pos_emb"] == "applied"
    assert out["status"]["paged_stash"] == "applied"  # the cpu pack still serves what flaggems does not register


def test_backend_override_is_parsed_and_validated(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setenv("FL_GEMS_BACKEND", "rms_norm=flaggems, rope=flaggems, nonsense, attention=TRITON")
    _runtime.reset_fallbacks()
    try:
        with caplog.at_level(logging.WARNING, logger="fl_patch.flaggems"):
            assert _runtime.backend("rms_norm") == "flaggems"
            assert _runtime.backend("attention") == "triton"
            assert _runtime.backend("rope") == "triton"  # FlagGems has no training RoPE: entry ignored
        ignored = [r.getMessage() for r in caplog.records]
        assert len(ignored) == 2 and "rope=flaggems" in ignored[0] and "nonsense" in ignored[1]
        with _runtime.use_backend("rms_norm", "triton"):
            assert _runtime.backend("rms_norm") == "triton"
        assert _runtime.backend("rms_norm") == "flaggems"
        with pytest.raises(ValueError, match="no backend"):
            with _runtime.use_backend("rope", "flaggems"):
                pass
    finally:
        monkeypatch.delenv("FL_GEMS_BACKEND")
        _runtime.reset_fallbacks()


# ---------------------------------------------------------------------------------- optimizer step
def _adam_pair(adam_w_mode: bool, steps: int = 8) -> tuple[list[torch.Tensor], list[torch.Tensor], object]:
    """The same steps with the pack's FusedAdam (torch's fused kernel) and torch's default Adam/AdamW."""
    from fl_patch.impls.flaggems.optimizer import FusedAdam

    gen = torch.Generator().manual_seed(0)
    shapes = [(37, 5), (1000,), (3, 7, 11), (1,)]
    start = [torch.randn(s, generator=gen) for s in shapes]
    grads = [[torch.randn(s, generator=gen) for s in shapes] for _ in range(steps)]
    ours = [p.clone().requires_grad_(True) for p in start]
    theirs = [p.clone().requires_grad_(True) for p in start]
    groups = lambda ps: [{"params": ps[:2], "weight_decay": 0.1}, {"params": ps[2:], "weight_decay": 0.0}]  # noqa: E731
    fused = FusedAdam(groups(ours), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, adam_w_mode=adam_w_mode)
    cls = torch.optim.AdamW if adam_w_mode else torch.optim.Adam
    reference = cls(groups(theirs), lr=1e-2, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    for step_grads in grads:
        for p, q, g in zip(ours, theirs, step_grads, strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        fused.step()
        reference.step()
    return ours, theirs, fused


@pytest.mark.parametrize("adam_w_mode", [True, False], ids=["adamw", "adam_l2"])
def test_fused_adam_equals_the_unfused_step(adam_w_mode: bool) -> None:
    ours, theirs, fused = _adam_pair(adam_w_mode)
    assert isinstance(fused, torch.optim.AdamW)  # megatron's distributed optimizer checks this
    assert all(g["fused"] for g in fused.param_groups)
    assert all(g["decoupled_weight_decay"] is adam_w_mode for g in fused.param_groups)
    for p, q in zip(ours, theirs, strict=True):
        # fp32: the fused kernel rounds in another order; 8 steps of lr 1e-2 stay within a few ulp
        torch.testing.assert_close(p, q, rtol=2e-6, atol=2e-7)


def test_fused_adam_takes_its_learning_rate_later_and_fills_adams_step() -> None:
    """OptimizerConfig's default lr=None (the scheduler sets it) builds, as with Apex/TE; a step before any
    lr names the cause; once set, the steps equal those of lr given up front; state made the way megatron's
    init_state_fn makes it (no "step") saves and steps."""
    from fl_patch.impls.flaggems.optimizer import FusedAdam

    torch.manual_seed(0)
    start = [torch.randn(5, 3), torch.randn(7)]
    grads = [torch.randn(5, 3), torch.randn(7)]

    def build(lr: float | None) -> tuple[FusedAdam, list[torch.nn.Parameter]]:
        params = [torch.nn.Parameter(t.clone()) for t in start]
        return FusedAdam([{"params": params[:1]}, {"params": params[1:]}], lr=lr, weight_decay=0.1), params

    later, later_params = build(None)
    assert [g["lr"] for g in later.param_groups] == [None, None]
    for p, g in zip(later_params, grads, strict=True):
        p.grad = g.clone()
    with pytest.raises(ValueError, match="param group 0 has no learning rate"):
        later.step()
    for group in later.param_groups:
        group["lr"] = 1e-2
    for p in later_params:  # megatron's init_state_fn: the moments, no step
        later.state[p]["exp_avg"] = torch.zeros_like(p)
        later.state[p]["exp_avg_sq"] = torch.zeros_like(p)
    assert {float(s["step"]) for s in later.state_dict()["state"].values()} == {0.0}
    given, given_params = build(1e-2)
    for p, g in zip(given_params, grads, strict=True):
        p.grad = g.clone()
    for _ in range(2):
        later.step()
        given.step()
    for ours, theirs in zip(later_params, given_params, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_fused_adam_keeps_its_weight_decay_mode_through_a_checkpoint() -> None:
    from fl_patch.impls.flaggems.optimizer import FusedAdam

    _, _, fused = _adam_pair(adam_w_mode=False, steps=2)
    state = fused.state_dict()
    params = [torch.zeros_like(p, requires_grad=True) for g in fused.param_groups for p in g["params"]]
    fresh = FusedAdam([{"params": params[:2]}, {"params": params[2:]}], adam_w_mode=False)
    fresh.load_state_dict(state)  # torch's AdamW.__setstate__ would turn decoupled weight decay on
    assert [g["decoupled_weight_decay"] for g in fresh.param_groups] == [False, False]
    with pytest.raises(TypeError, match="exp_avg_dtype"):
        FusedAdam(params, exp_avg_dtype=torch.float16)


def test_multi_tensor_norm_and_scale_without_per_tensor_syncs() -> None:
    from fl_patch.impls.flaggems.optimizer import local_multi_tensor_l2_norm, local_multi_tensor_scale

    gen = torch.Generator().manual_seed(1)
    tensors = [torch.randn(s, generator=gen) for s in ((5, 3), (1000,), (2, 2, 2))]
    half = [torch.randn(7, generator=gen).to(torch.bfloat16)]
    norm, per = local_multi_tensor_l2_norm(0, None, [tensors + half], True)
    want = torch.cat([t.double().flatten() for t in tensors + half]).norm()
    assert norm.shape == (1,) and norm.dtype == torch.float32
    torch.testing.assert_close(norm.double(), want.reshape(1), rtol=1e-6, atol=0.0)
    torch.testing.assert_close(per, torch.stack([t.float().norm() for t in tensors + half]))
    assert local_multi_tensor_l2_norm(0, None, [[]], False)[0].item() == 0.0
    # in place (gradient clipping), a copy into bf16 (main to model parameters), and scale-and-copy
    grads = [t.clone() for t in tensors]
    local_multi_tensor_scale(0, None, [grads, grads], 0.25)
    for g, t in zip(grads, tensors, strict=True):
        torch.testing.assert_close(g, t * 0.25, rtol=0, atol=0)
    model = [torch.empty_like(t, dtype=torch.bfloat16) for t in tensors]
    local_multi_tensor_scale(0, None, [tensors, model], 1.0)
    assert all(torch.equal(m, t.to(torch.bfloat16)) for m, t in zip(model, tensors, strict=True))
    out = [torch.empty_like(t) for t in tensors]
    local_multi_tensor_scale(0, None, [tensors, out], 3.0)
    assert all(torch.equal(o, t * 3.0) for o, t in zip(out, tensors, strict=True))


@pytest.mark.xfail(
    reason="on this machine the loss at step 5 differs by rel 7.0e-5 (> 1e-5) between the pack's FusedAdam and "
    "torch's AdamW, identically at c383c6c (the last landed commit) and after this round's changes: "
    "environmental or a latent numerics gap, not yet explained (see the closing note of issue 23)",
    strict=False,
)
def test_megatron_optimizer_steps_with_and_without_the_pack(run_python) -> None:
    """get_megatron_optimizer builds the pack's fused Adam; six clipped steps equal the unfused ones."""
    runs = {}
    for name, extra in (("pack", {"MG_FL_PREFER": "flaggems"}), ("upstream", {})):
        proc = run_python(str(SUPPORT / "flaggems" / "gems_optimizer.py"), env=clean_env(**extra), timeout=300)
        runs[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    pack, upstream = runs["pack"], runs["upstream"]
    assert set(pack) == {"fp32", "bf16", "bf16_distributed"}
    for setting in pack:
        ours, theirs = pack[setting], upstream[setting]
        assert "fl_patch.impls.flaggems.optimizer.FusedAdam" in ours["optimizer_mro"], ours["optimizer_mro"]
        assert theirs["optimizer"] == "torch.optim.adamw.AdamW" and not any(theirs["fused"])
        assert all(ours["fused"]) and all(ours["decoupled"])
        assert ours["grad_norms"][0] == pytest.approx(theirs["grad_norms"][0], rel=1e-6)
        # fp32 main parameters either way: the updates differ by rounding only
        assert ours["losses"] == pytest.approx(theirs["losses"], rel=1e-5)
        assert ours["param_sums"] == pytest.approx(theirs["param_sums"], rel=1e-4, abs=1e-3)


# ---------------------------------------------------------------------------------- lean launch path
class _Param:
    def __init__(self, name: str) -> None:
        import inspect

        self.name, self.default = name, inspect.Parameter.empty


class _Compiled:
    """What the lean path reads of a triton CompiledKernel; records its launches."""

    packed_metadata, function = "packed", "function"

    def __init__(self, launches: list) -> None:
        self.launches = launches

    def run(self, g0, g1, g2, stream, function, packed, metadata, enter, exit_, *args) -> None:
        self.launches.append(("lean", (g0, g1, g2), stream, (metadata, enter, exit_), args))


class _Kernel:
    """A JIT kernel with parameters X, N (runtime) and BLOCK (constexpr); ``kernel[grid](...)`` records a launch."""

    params = [_Param("X"), _Param("N"), _Param("BLOCK")]

    def __init__(self) -> None:
        self.launches: list = []

    def __getitem__(self, grid: tuple):
        def call(*args: object, **kwargs: object) -> _Compiled:
            self.launches.append(("triton", tuple(grid), kwargs))
            return _Compiled(self.launches)

        return call


def test_lean_launch_keys_on_the_arguments_and_takes_each_call_s_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch path's logic on CPU with stand-in kernels (the GPU tests run it on real ones): a repeated
    signature goes to the compiled kernel's launcher with no hooks, the trailing constexprs appended and
    the grid of *this* call (a grid can depend on a size no argument carries: RoPE's sequence length);
    another alignment or integer goes through triton again."""
    from types import SimpleNamespace

    from fl_patch.impls.flaggems import kernels

    monkeypatch.setattr(kernels, "SETTINGS", kernels.LaunchSettings(autotune=False, lean=True))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    knobs = SimpleNamespace(runtime=SimpleNamespace(launch_enter_hook=SimpleNamespace(calls=[]), launch_exit_hook=None))
    monkeypatch.setattr(kernels, "_TRITON", [knobs, SimpleNamespace(get_current_stream=lambda device: 77)])
    monkeypatch.setattr(kernels, "_LEAN", {})
    kernel = _Kernel()
    x = torch.zeros(64)
    rows = {"n": 16}
    grid = lambda meta: (rows["n"] // meta["BLOCK"],)  # noqa: E731  (rows: no kernel argument)
    default = {"BLOCK": 4, "num_warps": 4}
    before = dict(kernels.LEAN_STATS)
    assert kernels.launch(kernel, None, grid, default, x, 8) == default
    kernels.launch(kernel, None, grid, default, x, 8)
    rows["n"] = 64
    kernels.launch(kernel, None, grid, default, x, 8)
    kernels.launch(kernel, None, grid, default, x[1:], 8)  # 4-byte aligned: another specialization
    kernels.launch(kernel, None, grid, default, x, 9)  # another integer
    kinds = [(entry[0], entry[1]) for entry in kernel.launches]
    assert kinds == [("triton", (4,)), ("lean", (4, 1, 1)), ("lean", (16, 1, 1)), ("triton", (16,)), ("triton", (16,))]
    _, _, stream, hooks, args = kernel.launches[1]
    assert stream == 77 and hooks == (None, None, None) and args == (x, 8, 4)  # X, N, then BLOCK
    assert kernel.launches[0][2] == {"BLOCK": 4, "num_warps": 4}
    # run(): an explicit grid, constexprs and options in the keywords
    kernels.run(kernel, (3,), x, 5, BLOCK=32, num_warps=8)
    kernels.run(kernel, (6, 2), x, 5, BLOCK=32, num_warps=8)
    assert [(e[0], e[1]) for e in kernel.launches[5:]] == [("triton", (3,)), ("lean", (6, 2, 1))]
    assert kernel.launches[6][4] == (x, 5, 32)
    # a profiler's hook installed: triton's own path (it calls the hooks)
    knobs.runtime.launch_enter_hook.calls.append(print)
    kernels.launch(kernel, None, grid, default, x, 8)
    assert kernel.launches[-1][0] == "triton"
    assert {k: kernels.LEAN_STATS[k] - before[k] for k in before} == {"lean": 3, "triton": 5}


def test_deterministic_mode_sources() -> None:
    """Deterministic mode follows FL_PATCH_DETERMINISTIC, torch's flag and a config's deterministic_mode."""
    import subprocess
    import sys

    code = (
        "import torch, types\n"
        "from fl_patch.impls.flaggems import _runtime as r\n"
        "a = r.deterministic()\n"
        "torch.use_deterministic_algorithms(True); b = r.deterministic()\n"
        "torch.use_deterministic_algorithms(False); c = r.deterministic()\n"
        "r.note_config(types.SimpleNamespace(deterministic_mode=False)); d = r.deterministic()\n"
        "r.note_config(types.SimpleNamespace(deterministic_mode=True)); e = r.deterministic()\n"
        "print(a, b, c, d, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "False", "False", "True"]
    env = {**__import__("os").environ, "FL_PATCH_DETERMINISTIC": "1"}
    code_env = "from fl_patch.impls.flaggems import _runtime as r; print(r.deterministic())"
    got = subprocess.run([sys.executable, "-c", code_env], capture_output=True, text=True, check=True, env=env)
    assert got.stdout.strip() == "True"


def test_grouped_gemm_is_trusted_only_after_it_matches_the_per_expert_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TE spec's grouped GEMM (te.py) runs torch's grouped kernel only once a small case, forward and backward,
    equals the per-expert loop on that device and dtype: a kernel that is wrong, or raises, is never trusted."""
    from fl_patch.impls.flaggems import te

    cpu = torch.device("cpu")
    monkeypatch.setattr(te, "_grouped", te._loop)  # a correct "grouped" kernel
    assert te._check_grouped(torch.float32, cpu) is None

    def wrong(x: torch.Tensor, weights: list[torch.Tensor], splits: list[int]) -> torch.Tensor:
        return te._loop(x, weights[::-1], splits)  # experts' weights swapped

    monkeypatch.setattr(te, "_grouped", wrong)
    reason = te._check_grouped(torch.float32, cpu)
    assert reason is not None and reason.startswith("torch._grouped_mm differs from the per-expert loop"), reason

    def raising(x: torch.Tensor, weights: list[torch.Tensor], splits: list[int]) -> torch.Tensor:
        raise RuntimeError("grouped gemm is not supported here\nmore")

    monkeypatch.setattr(te, "_grouped", raising)
    reason = te._check_grouped(torch.float32, cpu)
    assert reason == "torch._grouped_mm failed on cpu torch.float32: grouped gemm is not supported here", reason
    # CPU tensors never reach it: the reason is said, and the loop runs
    x = torch.randn(6, 8)
    assert te._grouped_reason(x, [torch.randn(8, 8)] * 2) == "input on cpu (the grouped GEMM needs CUDA)"


@pytest.mark.parametrize("impl_name", ["te.weighted_bias_swiglu_impl", "mlp.bias_swiglu_impl"])
def test_parameters_of_a_later_release_reach_upstream_as_passed(
    impl_name: str, megatron_core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Megatron-LM main (0.20) added ``clamp_value`` to both SwiGLU functions. The pack's takes main's calls
    (positional or keyword); left at None they change nothing, set they go to upstream as passed, said once."""
    import importlib

    module_name, function_name = impl_name.split(".")
    module = importlib.import_module(f"fl_patch.impls.flaggems.{module_name}")
    impl = getattr(module, function_name)
    upstream_calls: list[tuple] = []

    def upstream(*args: object, **kwargs: object) -> str:
        upstream_calls.append((args[4:], kwargs))  # after (input, bias, weights | fp8, fp8 | offload)
        return "upstream"

    monkeypatch.setattr(fl_patch, "original", lambda target: upstream)
    monkeypatch.setattr(module, "kernel_unavailable", lambda *tensors: None)  # as on a GPU
    monkeypatch.setattr(module.ops, "swiglu", lambda x, bias=None: x[..., : x.shape[-1] // 2])
    _runtime.reset_fallbacks()
    x, weights = torch.randn(4, 8), torch.rand(4, 1)
    second = weights if module_name == "te" else False  # (input, bias, weights | fp8_input_store, ...)
    for extra_args, extra_kwargs in (((), {}), ((False, None), {}), ((False,), {"clamp_value": None})):
        assert impl(x, None, second, *extra_args, **extra_kwargs) != "upstream"
    assert not upstream_calls and not _runtime.FALLBACKS
    assert impl(x, None, second, False, 7.0) == "upstream"
    assert impl(x, None, second, False, clamp_value=7.0) == "upstream"
    assert upstream_calls == [((7.0,), {}), ((), {"clamp_value": 7.0})]
    assert sum(_runtime.FALLBACKS.values()) == 2
    assert all("clamp_value=7.0" in reason for _, reason in _runtime.FALLBACKS), _runtime.FALLBACKS
