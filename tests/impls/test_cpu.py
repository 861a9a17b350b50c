"""The CPU pack, patch by patch, on the real megatron-core 0.19.2 in this process.

Each registered patch has one test that runs an upstream megatron-core function twice:
with the whole pack (the result must be right, on the CPU) and with the pack minus
that one patch (``FL_PATCH_DISABLE``: upstream must fail at the CUDA assumption the
patch's docstring names, in the upstream file it names). So each test shows both that
the assumption is real and that the patch removes it; none can pass with a no-op patch.

The whole-module replacement of ``transformer.moe.ops.paged_stash`` cannot be undone
in a process that imported megatron.core (that needed it); ``tests/scenarios/test_train_gpt.py`` shows
upstream failing without it.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import fl_patch
from fl_patch import Status
from fl_patch.activation import install as _activation

MC = "megatron.core"
REGISTRY = "fl_patch.impls.cpu.registry"
WITHOUT_TE_REGISTRY = "fl_patch.impls.without_te.registry"  # the shared pack the CPU pack registers for vendor cpu


# --------------------------------------------------------------------------- fixtures
@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def cpu_pack(disable: str = "") -> Iterator[None]:
    """The CPU pack installed in this process (megatron.core is already imported: late patches)."""
    _activation._reset_for_tests()  # forgets registrations: install() calls the pack's register_pack() afresh
    with _environ(
        FL_PATCH_PACKS="cpu",
        MG_FL_PREFER="cpu",
        FL_PATCH_ENTRY_POINTS="0",
        FL_PATCH_FLAGSCALE="0",
        FL_PATCH_DISABLE=disable,
    ):
        fl_patch.install()
    try:
        yield
    finally:
        _activation._reset_for_tests()


def _rebind_names_left_by_reloads() -> None:
    """Point names that modules bound to pre-``importlib.reload`` functions at the current ones.

    Other tests in this session reload megatron modules (``tests/core/test_target.py`` reloads
    ``optimizer.clip_grads``); ``optimizer.optimizer`` then still holds the previous module
    body's ``clip_grad_by_total_norm_fp32``, which no patch of the current one reaches. A
    fresh interpreter never has such names, so they are put back as it would have them.
    """
    import types

    for module in [m for name, m in list(sys.modules.items()) if name.startswith(f"{MC}.")]:
        if not isinstance(module, types.ModuleType):
            continue
        for name, value in list(vars(module).items()):
            owner = sys.modules.get(getattr(value, "__module__", None) or "")
            if not isinstance(value, types.FunctionType) or owner is None or owner is module:
                continue
            current = vars(owner).get(value.__name__)
            if (
                isinstance(current, types.FunctionType)
                and current is not value
                and current.__qualname__ == value.__qualname__
                and current.__code__.co_filename == value.__code__.co_filename
            ):
                setattr(module, name, current)


@pytest.fixture(scope="module")
def single_rank(megatron_core: object) -> Iterator[None]:
    """A one-process gloo world with megatron's model-parallel state (all sizes 1)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    _rebind_names_left_by_reloads()

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    parallel_state.initialize_model_parallel()
    yield
    parallel_state.destroy_model_parallel()
    if created:
        dist.destroy_process_group()


# --------------------------------------------------------------------------- helpers
def _seed(seed: int = 1234) -> None:
    from megatron.core import tensor_parallel

    tensor_parallel.model_parallel_cuda_manual_seed(seed)


def tiny_config(dtype: torch.dtype = torch.float32, **extra: object) -> object:
    from megatron.core.transformer import TransformerConfig

    return TransformerConfig(
        num_layers=1,
        hidden_size=16,
        num_attention_heads=2,
        use_cpu_initialization=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype is torch.bfloat16,
        fp16=dtype is torch.float16,
        **extra,
    )


def tiny_gpt(dtype: torch.dtype = torch.float32, **config_extra: object) -> torch.nn.Module:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.module import Float16Module

    config = tiny_config(dtype, **config_extra)
    _seed()
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=32,
        max_sequence_length=8,
        position_embedding_type="rope",
    )
    return model if dtype is torch.float32 else Float16Module(config, model)


def tiny_ddp(model: torch.nn.Module, *, distributed_optimizer: bool = False) -> object:
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=True, overlap_grad_reduce=False, use_distributed_optimizer=distributed_optimizer
    )
    return DistributedDataParallel(config=model.config, ddp_config=ddp_config, module=model)


def tiny_batch() -> dict[str, torch.Tensor]:
    tokens = torch.arange(16).reshape(2, 8) % 32
    return {
        "tokens": tokens,
        "labels": (tokens + 1) % 32,
        "position_ids": torch.arange(8).expand(2, 8),
    }


def lm_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    losses = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
    return losses.float().mean()


def train_step(ddp: object, optimizer: object) -> None:
    """One megatron training step on the tiny batch: zero, forward+backward, grad sync, optimizer step."""
    ddp.zero_grad_buffer()
    optimizer.zero_grad()
    lm_loss(ddp, tiny_batch()).backward()
    ddp.finish_grad_sync()
    assert optimizer.step()[0]


def optimizer_for(model: object, dtype: torch.dtype, *, distributed: bool = False) -> object:
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    config = OptimizerConfig(
        optimizer="adam",
        lr=1e-3,
        bf16=dtype is torch.bfloat16,
        fp16=dtype is torch.float16,
        params_dtype=dtype,
        use_distributed_optimizer=distributed,
        initial_loss_scale=2.0**10,
    )
    return get_megatron_optimizer(config, [model])


# --------------------------------------------------------------------------- the checks
def check_rng_seeding() -> None:
    """model_parallel_cuda_manual_seed seeds the CPU generator; tracked states are the seeded ones."""
    from megatron.core import tensor_parallel

    _seed(42)
    main = torch.Generator().manual_seed(42)
    model_parallel = torch.Generator().manual_seed(42 + 2718)  # upstream: seed + 2718 + tp_rank
    assert torch.equal(torch.rand(4), torch.rand(4, generator=main)), "default stream not seeded by seed"
    with tensor_parallel.get_cuda_rng_tracker().fork():
        assert torch.equal(torch.rand(4), torch.rand(4, generator=model_parallel)), "tracked state not used"


def check_rng_fork_restores() -> None:
    """Inside fork() the tracked stream is drawn from and advanced; outside, the default stream resumes."""
    from megatron.core import tensor_parallel

    _seed(7)
    tracker = tensor_parallel.get_cuda_rng_tracker()
    main = torch.Generator().manual_seed(7)
    tracked = torch.Generator().manual_seed(7 + 2718)
    drawn = [torch.rand(3)]
    with tracker.fork():
        drawn.append(torch.rand(3))
    drawn.append(torch.rand(3))
    with tracker.fork():
        drawn.append(torch.rand(3))
    expected = [torch.rand(3, generator=main), torch.rand(3, generator=tracked)]
    expected += [torch.rand(3, generator=main), torch.rand(3, generator=tracked)]
    for got, want in zip(drawn, expected, strict=True):
        assert torch.equal(got, want), "fork() did not set and restore the RNG state"


def check_fork_is_quiet(caplog: pytest.LogCaptureFixture) -> None:
    from megatron.core import tensor_parallel

    _seed(3)
    with caplog.at_level(logging.WARNING, logger="megatron.core.tensor_parallel.random"):
        for _ in range(3):
            with tensor_parallel.get_cuda_rng_tracker().fork():
                torch.nn.functional.dropout(torch.ones(64), p=0.5)
    noise = [r for r in caplog.records if "CPU RNG state changed" in r.getMessage()]
    assert not noise, f"fork() logged {len(noise)} 'CPU RNG state changed' warnings"


def check_global_memory_buffer_and_l2_norm() -> None:
    from megatron.core import utils

    buffer = utils.GlobalMemoryBuffer().get_tensor((2, 3), torch.float32, "scratch")
    assert buffer.shape == (2, 3) and buffer.device.type == "cpu"
    norm, _ = utils.local_multi_tensor_l2_norm(
        2048, None, [[torch.tensor([3.0, 0.0]), torch.tensor([4.0, 12.0])]], False
    )
    assert norm.device.type == "cpu" and norm.item() == pytest.approx(13.0)


def check_causal_masks() -> None:
    from megatron.core.transformer import utils

    mask = utils.get_default_causal_mask(4)
    assert mask.device.type == "cpu"
    assert torch.equal(mask, torch.ones(4, 4).triu(diagonal=1).bool())
    window = utils.get_sliding_window_causal_mask(4, 4, (1, 0))
    expected = ~torch.ones(4, 4, dtype=torch.bool).triu(-1).tril(0)
    assert torch.equal(window, expected)


def check_forward_backward_schedule() -> None:
    """get_forward_backward_func() runs, and its loss is the model's loss on the same batch."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    ddp = tiny_ddp(tiny_gpt())
    batch = tiny_batch()
    with torch.no_grad():
        expected = lm_loss(ddp.module, batch)

    def forward_step(data: Iterator[dict[str, torch.Tensor]], model: torch.nn.Module) -> tuple[object, object]:
        b = next(data)
        output = model(b["tokens"], b["position_ids"], None, labels=b["labels"])

        def loss_func(out: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            loss = out.float().mean()
            return loss, {"loss": loss.detach().clone()}

        return output, loss_func

    ddp.zero_grad_buffer()
    losses = get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=iter([batch]),
        model=[ddp],
        num_microbatches=1,
        seq_length=8,
        micro_batch_size=2,
        forward_only=False,
    )
    assert losses[0]["loss"].item() == pytest.approx(expected.item(), rel=1e-6)
    assert any(p.main_grad.abs().sum() > 0 for p in ddp.module.parameters())


def check_ddp_buffers_reduce_gradients() -> None:
    """megatron DDP's CPU buffers hold exactly the autograd gradients after the reduction."""
    model = tiny_gpt()
    batch = tiny_batch()
    params = [p for p in model.parameters() if p.requires_grad]
    reference = torch.autograd.grad(lm_loss(model, batch), params)
    ddp = tiny_ddp(model)
    assert all(buffer.grad_data.device.type == "cpu" for buffer in ddp.buffers)
    ddp.zero_grad_buffer()
    lm_loss(ddp, batch).backward()
    ddp.finish_grad_sync()
    for param, grad in zip(params, reference, strict=True):
        torch.testing.assert_close(param.main_grad, grad, rtol=1e-5, atol=1e-7)


def check_rotary_embedding() -> None:
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    rope = RotaryEmbedding(kv_channels=8, rotary_percent=1.0)  # upstream default: not CPU initialisation
    emb = rope(6)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float32) / 8))
    freqs = torch.outer(torch.arange(6, dtype=torch.float32), inv_freq)
    assert emb.device.type == "cpu" and rope.inv_freq.device.type == "cpu"
    torch.testing.assert_close(emb, torch.cat((freqs, freqs), dim=-1)[:, None, None, :])


def check_fp32_optimizer_step() -> None:
    """get_megatron_optimizer (fp32) builds and its step applies Adam's update."""
    ddp = tiny_ddp(tiny_gpt())
    optimizer = optimizer_for(ddp, torch.float32)
    before = [p.detach().clone() for p in ddp.module.parameters()]
    ddp.zero_grad_buffer()
    lm_loss(ddp, tiny_batch()).backward()
    ddp.finish_grad_sync()
    updated, grad_norm, _ = optimizer.step()
    assert updated and grad_norm > 0
    assert all(not torch.equal(b, p) for b, p in zip(before, ddp.module.parameters(), strict=True))


def _optimizer_with_lr(name: str, lr: float | None) -> tuple[object, object]:
    """A tiny model and megatron's optimizer for it; ``lr=None`` is OptimizerConfig's default."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    ddp = tiny_ddp(tiny_gpt())
    config = OptimizerConfig(optimizer=name, params_dtype=torch.float32)
    assert config.lr is None, "OptimizerConfig's default learning rate is no longer None"
    config.lr = lr
    return ddp, get_megatron_optimizer(config, [ddp])


def _check_learning_rate_set_later(name: str) -> None:
    """lr=None builds (as with TE/Apex); a step before any lr names the cause; once the
    groups' lr is set (a scheduler's job), training is exactly that of lr given up front."""
    ddp, optimizer = _optimizer_with_lr(name, None)
    with pytest.raises(ValueError, match="param group 0 has no learning rate"):
        optimizer.step()
    for group in optimizer.param_groups:
        group["lr"] = 1e-2
    given, given_optimizer = _optimizer_with_lr(name, 1e-2)
    for model, opt in ((ddp, optimizer), (given, given_optimizer)):
        train_step(model, opt)
        train_step(model, opt)
    for later, up_front in zip(ddp.module.parameters(), given.module.parameters(), strict=True):
        torch.testing.assert_close(later, up_front, rtol=0, atol=0)
    fresh = tiny_gpt()
    assert any(not torch.equal(p, q) for p, q in zip(ddp.module.parameters(), fresh.parameters(), strict=True)), (
        "the optimizer did not change the parameters"
    )


def check_adam_learning_rate_set_later() -> None:
    _check_learning_rate_set_later("adam")


def check_sgd_learning_rate_set_later() -> None:
    _check_learning_rate_set_later("sgd")


def check_float16_optimizer_main_params() -> None:
    """bf16 parameters get fp32 main copies equal to them, as on a GPU."""
    ddp = tiny_ddp(tiny_gpt(torch.bfloat16))
    optimizer = optimizer_for(ddp, torch.bfloat16)
    inner = optimizer.chained_optimizers[0] if hasattr(optimizer, "chained_optimizers") else optimizer
    assert type(inner).__name__ == "Float16OptimizerWithFloat16Params"
    float16 = [p for group in inner.float16_groups for p in group]
    assert float16 and all(p.dtype is torch.bfloat16 for p in float16)
    for param in float16:
        assert param.main_param.dtype is torch.float32
        torch.testing.assert_close(param.main_param, param.float())
    # the instance-level type() answers were removed again
    assert all("type" not in vars(p) for p in ddp.module.parameters())


def check_fp16_found_inf_skips_the_step() -> None:
    """fp16: inf gradients are found, the updates skipped, and the loss scale backs off."""
    ddp = tiny_ddp(tiny_gpt(torch.float16))
    optimizer = optimizer_for(ddp, torch.float16)
    scale = optimizer.get_loss_scale().item()
    before = [p.detach().clone() for p in ddp.module.parameters()]
    for _ in range(2):  # megatron's default hysteresis: the scale backs off at the second overflow
        ddp.zero_grad_buffer()
        (lm_loss(ddp, tiny_batch()) * optimizer.get_loss_scale()).backward()
        ddp.finish_grad_sync()
        next(iter(ddp.module.parameters())).main_grad.view(-1)[0] = math.inf
        updated, _, _ = optimizer.step()
        assert not updated
    assert all(torch.equal(b, p) for b, p in zip(before, ddp.module.parameters(), strict=True))
    assert optimizer.get_loss_scale().item() == scale / 2
    # and a clean step is applied
    ddp.zero_grad_buffer()
    (lm_loss(ddp, tiny_batch()) * optimizer.get_loss_scale()).backward()
    ddp.finish_grad_sync()
    updated, _, _ = optimizer.step()
    assert updated
    assert any(not torch.equal(b, p) for b, p in zip(before, ddp.module.parameters(), strict=True))


def check_high_priority_stream_groups_build_without_nccl() -> None:
    """megatron's model-parallel groups with NCCL communicator options (what validate_args asks for ``dp_cp`` with
    --use-torch-fsdp2) build on a torch without NCCL, and the groups work."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    try:
        parallel_state.initialize_model_parallel(high_priority_stream_groups=["dp_cp"])
        ones = torch.ones(3)
        dist.all_reduce(ones, group=parallel_state.get_data_parallel_group(with_context_parallel=True))
        assert ones.tolist() == [1.0, 1.0, 1.0]
    finally:
        parallel_state.destroy_model_parallel()
        parallel_state.initialize_model_parallel()


def check_distributed_optimizer() -> None:
    """The distributed optimizer builds on CPU tensors and steps."""
    ddp = tiny_ddp(tiny_gpt(torch.bfloat16), distributed_optimizer=True)
    optimizer = optimizer_for(ddp, torch.bfloat16, distributed=True)
    inner = optimizer.chained_optimizers[0] if hasattr(optimizer, "chained_optimizers") else optimizer
    assert type(inner).__name__ == "DistributedOptimizer"
    ddp.zero_grad_buffer()
    lm_loss(ddp, tiny_batch()).backward()
    ddp.finish_grad_sync()
    updated, grad_norm, _ = optimizer.step()
    assert updated and grad_norm > 0


def check_distributed_optimizer_resumes_exactly(tmp_path_factory: pytest.TempPathFactory) -> None:
    """fp32 distributed optimizer: save after two steps, load into a fresh one, step both: equal. Both sharding
    types megatron writes: ``dp_reshardable`` and ``fully_reshardable`` (whose tensors carry no Adam ``step``)."""
    from megatron.core import dist_checkpointing

    def build() -> tuple[object, object]:
        ddp = tiny_ddp(tiny_gpt(), distributed_optimizer=True)
        return ddp, optimizer_for(ddp, torch.float32, distributed=True)

    for sharding in ("dp_reshardable", "fully_reshardable"):
        where = tmp_path_factory.mktemp(f"distopt-{sharding}")
        metadata = {"distrib_optim_sharding_type": sharding}
        ddp, optimizer = build()
        train_step(ddp, optimizer)
        train_step(ddp, optimizer)
        model_state = ddp.module.sharded_state_dict()
        state = {"model": model_state, "optimizer": optimizer.sharded_state_dict(model_state, metadata=metadata)}
        dist_checkpointing.save(state, str(where))

        fresh, fresh_optimizer = build()
        model_state = fresh.module.sharded_state_dict()
        template = {
            "model": model_state,
            "optimizer": fresh_optimizer.sharded_state_dict(model_state, is_loading=True, metadata=metadata),
        }
        loaded = dist_checkpointing.load(template, str(where))
        fresh.module.load_state_dict(loaded["model"])
        fresh_optimizer.load_state_dict(loaded["optimizer"])

        inner = fresh_optimizer.chained_optimizers[0].optimizer
        steps = [state["step"] for state in inner.state.values()]
        assert len({id(s) for s in steps}) == len(steps), "parameters share one Adam step counter"
        assert {float(s) for s in steps} == {2.0}, f"Adam's step count was not restored ({sharding})"
        train_step(ddp, optimizer)
        train_step(fresh, fresh_optimizer)
        for original, resumed in zip(ddp.module.parameters(), fresh.module.parameters(), strict=True):
            assert torch.equal(original, resumed), f"the resumed optimizer does not continue the run ({sharding})"


def check_clip_grad_by_total_norm() -> None:
    from megatron.core.optimizer import clip_grads

    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))]
    params[0].grad = torch.tensor([3.0, 0.0])
    params[1].grad = torch.tensor([4.0])
    total = clip_grads.get_grad_norm_fp32([p.grad for p in params])
    assert total == pytest.approx(5.0)
    clip_grads.clip_grad_by_total_norm_fp32(params, max_norm=1.0, total_norm=total)
    torch.testing.assert_close(params[0].grad, torch.tensor([0.6, 0.0]), rtol=1e-5, atol=0)
    torch.testing.assert_close(params[1].grad, torch.tensor([0.8]), rtol=1e-5, atol=0)
    # upstream's check still holds: a gradient that is not fp32 is refused, as on a GPU
    half = torch.nn.Parameter(torch.zeros(1, dtype=torch.bfloat16))
    half.grad = torch.ones(1, dtype=torch.bfloat16)
    with pytest.raises(AssertionError):
        clip_grads.clip_grad_by_total_norm_fp32([half], max_norm=1.0, total_norm=1.0)
    assert all("type" not in vars(p.grad) for p in [*params, half])


def check_dynamic_grad_scaler() -> None:
    from megatron.core.optimizer.grad_scaler import DynamicGradScaler

    def scaler() -> DynamicGradScaler:
        return DynamicGradScaler(
            initial_scale=2.0**8, min_scale=1.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2, hysteresis=1
        )

    first = scaler()
    first.update(found_inf=True)
    assert first.scale.device.type == "cpu" and first.scale.item() == 2.0**7
    second = scaler()
    second.load_state_dict(copy.deepcopy(first.state_dict()))
    assert second.scale.device.type == "cpu" and second.scale.item() == 2.0**7
    second.update(found_inf=False)
    second.update(found_inf=False)
    assert second.scale.item() == 2.0**8  # grows after growth_interval clean steps


def check_dist_checkpointing_round_trip(tmp_path_factory: pytest.TempPathFactory) -> None:
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor

    saved = torch.arange(12.0).reshape(3, 4)
    where = tmp_path_factory.mktemp("checkpoint")
    dist_checkpointing.save({"w": ShardedTensor.from_rank_offsets("w", saved.clone())}, str(where))
    target = {"w": ShardedTensor.from_rank_offsets("w", torch.zeros(3, 4))}
    loaded = dist_checkpointing.load(target, str(where))
    assert torch.equal(loaded["w"], saved)


def check_fused_softmax_falls_back() -> None:
    from megatron.core.fusions.fused_softmax import FusedScaleMaskSoftmax
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.utils import attention_mask_func

    softmax = FusedScaleMaskSoftmax(
        input_in_fp16=True,
        input_in_bf16=False,
        attn_mask_type=AttnMaskType.causal,
        scaled_masked_softmax_fusion=True,  # what masked_softmax_fusion=True asks for
        mask_func=attention_mask_func,
        softmax_in_fp32=True,
        scale=None,
    )
    scores = torch.randn(2, 2, 32, 32, generator=torch.Generator().manual_seed(0)).half()
    probs = softmax(scores, None)
    causal = torch.ones(32, 32).triu(diagonal=1).bool()
    expected = torch.softmax(scores.float().masked_fill(causal, -10000.0), dim=-1).half()
    torch.testing.assert_close(probs, expected)


def _main_grads_of_one_backward(dtype: torch.dtype, fusion: bool) -> dict[str, torch.Tensor]:
    ddp = tiny_ddp(tiny_gpt(dtype, gradient_accumulation_fusion=fusion))
    ddp.zero_grad_buffer()
    for _ in range(2):  # two micro-batches: the second adds to the first's main_grad
        lm_loss(ddp, tiny_batch()).backward()
    ddp.finish_grad_sync()
    return {name: p.main_grad.clone() for name, p in ddp.named_parameters()}


def check_gradient_accumulation_fusion() -> None:
    """gradient_accumulation_fusion=True: the same main_grad as without (fp32 up to rounding; bf16 within its tolerance)."""
    reference = _main_grads_of_one_backward(torch.float32, fusion=False)
    fused = _main_grads_of_one_backward(torch.float32, fusion=True)
    linear = [name for name in reference if "linear_" in name and name.endswith("weight")]
    assert len(linear) == 4, linear  # qkv, proj, fc1, fc2: the layers megatron's fusion covers
    for name in reference:
        torch.testing.assert_close(fused[name], reference[name], rtol=1e-5, atol=1e-6, msg=name)
        assert fused[name].abs().sum() > 0, name
    fused_bf16 = _main_grads_of_one_backward(torch.bfloat16, fusion=True)
    unfused_bf16 = _main_grads_of_one_backward(torch.bfloat16, fusion=False)
    linear_bf16 = [name for name in fused_bf16 if "linear_" in name and name.endswith("weight")]
    assert len(linear_bf16) == 4, linear_bf16
    for name in linear_bf16:
        torch.testing.assert_close(fused_bf16[name], unfused_bf16[name], rtol=2e-2, atol=2e-3, msg=name)


def check_indices_to_multihot() -> None:
    """MoE's indices -> multihot converter (a Triton kernel upstream): each valid index sets its expert's column."""
    from megatron.core.fusions.fused_indices_converter import fused_indices_to_multihot

    indices = torch.tensor([[0, 2], [-1, 1], [3, -1]], dtype=torch.int32)
    probs = torch.tensor([[0.6, 0.4], [0.0, 1.0], [0.7, 0.0]], requires_grad=True)
    multihot, in_multihot = fused_indices_to_multihot(indices, probs, 4)
    assert multihot.tolist() == [[True, False, True, False], [False, True, False, False], [False, False, False, True]]
    torch.testing.assert_close(in_multihot, torch.tensor([[0.6, 0, 0.4, 0], [0, 1.0, 0, 0], [0, 0, 0, 0.7]]))
    in_multihot.backward(torch.arange(12.0).reshape(3, 4))
    torch.testing.assert_close(probs.grad, torch.tensor([[0.0, 2.0], [0.0, 5.0], [11.0, 0.0]]))


@dataclass(frozen=True)
class Case:
    target: str  # the registered target (relative to megatron.core)
    check: Callable[..., None]
    upstream_file: str | None  # where upstream fails without the patch (None: a wrong result instead)
    error: type[BaseException]
    match: str
    also_disable: str = ""  # another patch that reaches the same upstream line (comma-separated targets)


CASES = [
    Case(
        "parallel_state.get_nccl_options",
        check_high_priority_stream_groups_build_without_nccl,
        "parallel_state.py",
        AttributeError,
        "ProcessGroupNCCL",
    ),
    Case("tensor_parallel.random.torch", check_rng_seeding, "tensor_parallel/random.py", AssertionError, "CUDA"),
    Case(
        "tensor_parallel.random._set_cuda_rng_state", check_rng_fork_restores, None, AssertionError, "set and restore"
    ),
    Case("tensor_parallel.random.CudaRNGStatesTracker.fork", check_fork_is_quiet, None, AssertionError, "logged"),
    Case("utils.torch", check_global_memory_buffer_and_l2_norm, "core/utils.py", AssertionError, "CUDA"),
    Case("transformer.utils.torch", check_causal_masks, "transformer/utils.py", AssertionError, "CUDA"),
    Case("pipeline_parallel.schedules.torch", check_forward_backward_schedule, "schedules.py", AssertionError, "CUDA"),
    Case(
        "distributed.param_and_grad_buffer.torch",
        check_ddp_buffers_reduce_gradients,
        "param_and_grad_buffer.py",
        AssertionError,
        "CUDA",
    ),
    Case(
        "models.common.embeddings.rotary_pos_embedding.torch",
        check_rotary_embedding,
        "rotary_pos_embedding.py",
        AssertionError,
        "CUDA",
    ),
    Case("optimizer.optimizer.torch", check_fp32_optimizer_step, "optimizer/optimizer.py", AssertionError, "CUDA"),
    Case(
        "optimizer.optimizer.Float16OptimizerWithFloat16Params.__init__",
        check_float16_optimizer_main_params,
        "optimizer/optimizer.py",
        TypeError,
        "Wrapped parameters must be one of",
    ),
    Case("optimizer.grad_scaler.torch", check_fp16_found_inf_skips_the_step, "grad_scaler.py", AssertionError, "CUDA"),
    Case(
        "optimizer.distrib_optimizer.DistributedOptimizer.__init__",
        check_distributed_optimizer,
        "distrib_optimizer.py",
        TypeError,
        "Wrapped parameters must be one of",
    ),
    Case(
        "optimizer.distrib_optimizer.torch",
        check_distributed_optimizer_resumes_exactly,
        "distrib_optimizer.py",
        AssertionError,
        "CUDA",
    ),
    Case(
        "optimizer.distrib_optimizer.DistributedOptimizer.state_dict",
        check_distributed_optimizer_resumes_exactly,
        "distrib_optimizer.py",
        AssertionError,  # upstream: assert len(steps) == 1, on an optimizer without state
        "^$",
    ),
    Case(
        "optimizer.distrib_optimizer.DistributedOptimizer.load_state_dict",
        check_distributed_optimizer_resumes_exactly,
        None,
        AssertionError,
        "share one Adam step counter",
    ),
    Case(
        "optimizer.distrib_optimizer.DistributedOptimizer._set_main_param_and_optimizer_states",
        check_distributed_optimizer_resumes_exactly,
        "distrib_optimizer.py",
        RuntimeError,
        "a view of a leaf Variable that requires grad",
    ),
    Case(
        "optimizer.torch",
        check_adam_learning_rate_set_later,
        "optimizer/__init__.py",
        TypeError,  # torch's Adam: 0.0 <= lr
        "not supported between instances of 'float' and 'NoneType'",
    ),
    Case(
        "optimizer.SGD",
        check_sgd_learning_rate_set_later,
        "optimizer/__init__.py",
        TypeError,  # torch's SGD: lr < 0.0
        "not supported between instances of 'NoneType' and 'float'",
    ),
    Case("optimizer.clip_grads.torch", check_clip_grad_by_total_norm, "clip_grads.py", AssertionError, "CUDA"),
    Case(
        "optimizer.clip_grads.clip_grad_by_total_norm_fp32",
        check_clip_grad_by_total_norm,
        "clip_grads.py",
        AssertionError,  # upstream: assert param.grad.type() == 'torch.cuda.FloatTensor'
        "^$",
    ),
    Case(
        "optimizer.grad_scaler.DynamicGradScaler.load_state_dict",
        check_dynamic_grad_scaler,
        "grad_scaler.py",
        RuntimeError,
        "cuda",
        also_disable="torch.Tensor.cuda",  # the training pack's Tensor.cuda also reaches upstream's .cuda(...)
    ),
    Case(
        "dist_checkpointing.strategies.filesystem_async.torch",
        check_dist_checkpointing_round_trip,
        "filesystem_async.py",
        AssertionError,
        "CUDA",
    ),
    Case(
        "dist_checkpointing.strategies.state_dict_saver.torch",
        check_dist_checkpointing_round_trip,
        "state_dict_saver.py",
        AssertionError,
        "CUDA",
    ),
    Case(
        "tensor_parallel.layers.torch",
        check_gradient_accumulation_fusion,
        "tensor_parallel/layers.py",
        AssertionError,
        "CUDA",
    ),
    Case(
        "tensor_parallel.layers._grad_accum_fusion_available",
        check_gradient_accumulation_fusion,
        "tensor_parallel/layers.py",
        RuntimeError,
        "fused_weight_gradient_mlp_cuda module is not found",
    ),
    Case(
        "tensor_parallel.layers.fused_weight_gradient_mlp_cuda",
        check_gradient_accumulation_fusion,
        "tensor_parallel/layers.py",
        NameError,
        "fused_weight_gradient_mlp_cuda",
    ),
    Case(
        # (upstream allocates on device="cuda" first; under the CUDA-on-CPU transfer it gets as far as its kernel
        # launch: "'_GeneratorContextManager' object is not subscriptable", docs/cuda_on_cpu.md)
        "fusions.fused_indices_converter.fused_indices_to_multihot",
        check_indices_to_multihot,
        "fused_indices_converter.py",
        AssertionError,
        "CUDA",
    ),
    Case(
        "fusions.fused_softmax.FusedScaleMaskSoftmax.is_kernel_available",
        check_fused_softmax_falls_back,
        "fused_softmax.py",
        ModuleNotFoundError,
        "scaled_masked_softmax_cuda",
    ),
]


def _call(check: Callable[..., None], request: pytest.FixtureRequest) -> None:
    import inspect

    kwargs = {name: request.getfixturevalue(name) for name in inspect.signature(check).parameters}
    check(**kwargs)


@pytest.mark.parametrize("case", CASES, ids=[c.target for c in CASES])
def test_patch_removes_the_cuda_assumption_and_the_result_is_right(
    case: Case, single_rank: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    target = f"{MC}.{case.target}"
    with cpu_pack():
        _call(case.check, request)
        (record,) = [r for r in fl_patch.report() if r.target == target and r.vendor == "cpu"]
        assert record.status is Status.APPLIED, record
    disable = ",".join(filter(None, [target, case.also_disable]))
    with cpu_pack(disable=disable), pytest.raises(case.error, match=case.match) as excinfo:
        _call(case.check, request)
    if case.upstream_file is not None:
        frames = [str(entry.path) for entry in excinfo.traceback]
        assert any(f.endswith(case.upstream_file) and "megatron" in f for f in frames), frames


def test_every_registered_patch_has_a_test_here() -> None:
    with cpu_pack():
        # megatron-core's patches of the pack and of the shared pack without_te it registers; megatron.training's
        # (the registry's second part) are tested in tests/impls/test_cpu_training.py.
        registered = {
            r.target
            for r in fl_patch.report()
            if r.vendor == "cpu" and r.source in (REGISTRY, WITHOUT_TE_REGISTRY) and r.target.startswith(f"{MC}.")
        }
    tested = {f"{MC}.{c.target}" for c in CASES}
    assert registered - tested == set(TESTED_ELSEWHERE)
    assert tested <= registered


# Patches of the CPU pack whose test needs more than one process here (ranks, a whole model):
# the test that would fail without each.
TESTED_ELSEWHERE = {
    f"{MC}.transformer.moe.ops.paged_stash": "tests/scenarios/test_train_gpt.py",
    f"{MC}.parallel_state.destroy_model_parallel": "tests/host/test_ranks.py::test_gloo_groups_megatron_drops_are_freed_and_devices_are_one_per_local_rank",
    f"{MC}.models.common.embeddings.rope_utils.fused_apply_rotary_pos_emb": "tests/host/test_ranks.py::test_fused_rope_on_the_host_matches_megatrons_unfused_path",
    f"{MC}.models.common.embeddings.rope_utils.fused_apply_rotary_pos_emb_thd": "tests/host/test_ranks.py::test_fused_rope_on_the_host_matches_megatrons_unfused_path",
    f"{MC}.utils.get_te_version": "tests/host/test_ranks.py::test_te_version_helpers_give_one_answer_without_te_even_with_a_stand_in",
    f"{MC}.distributed.fsdp.src.megatron_fsdp.utils.get_te_version": "tests/host/test_ranks.py::test_te_version_helpers_give_one_answer_without_te_even_with_a_stand_in",
    f"{MC}.models.common.embeddings.yarn_rotary_pos_embedding.torch": "tests/impls/test_te.py::test_te_spec_module_tree_checkpoints_moe_mla (MLA with YaRN)",
    f"{MC}.transformer.moe.moe_utils.maybe_move_tensor_to_cpu": "tests/impls/test_te.py::test_pretrain_gpt_te_spec_moe_ep2_mla (alltoall at EP=2)",
    # its streams need the CUDA-on-CPU transfer, which this file leaves off
    f"{MC}.optimizer.cpu_offloading.hybrid_optimizer.HybridDeviceOptimizer._get_sub_optimizer_param_groups": "tests/impls/test_cuda_on_cpu.py::test_optimizer_cpu_offload_steps_as_adam_on_host_parameters",
    # megatron-core without flash-attn / TE, or from the wheel (cpu/without_extensions.py)
    f"{MC}.utils.get_fa_version": "tests/impls/test_cuda_on_cpu.py::test_megatron_without_te_and_flash_attn_with_and_without_the_patches",
    f"{MC}.tensor_parallel.random.CheckpointWithoutOutput.__init__": "tests/impls/test_cuda_on_cpu.py::test_megatron_without_te_and_flash_attn_with_and_without_the_patches",
    f"{MC}.datasets.utils.compile_helpers": "tests/impls/test_cuda_on_cpu.py::test_megatron_without_te_and_flash_attn_with_and_without_the_patches",
    # megatron-core modules only megatron.training reaches (the registry's megatron.training part)
    f"{MC}.timers.torch": "tests/impls/test_cpu_training.py (WITHOUT)",
    f"{MC}.rerun_state_machine.torch": "tests/impls/test_cpu_training.py (WITHOUT)",
    # decorates megatron's fusions as they import: a fresh process (the megatron here imported without the pack)
    f"{MC}.jit.jit_fuser": "tests/impls/test_cpu.py::test_importing_megatron_compiles_nothing_until_a_compiled_function_is_called",
}


# --------------------------------------------------------------------------- the pieces themselves
def test_paged_stash_stand_in_provides_what_upstream_imports_from_it(megatron_core: object) -> None:
    importer = importlib.import_module(f"{MC}.transformer.moe.paged_stash")
    tree = ast.parse(Path(importer.__file__).read_text())
    wanted = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == f"{MC}.transformer.moe.ops.paged_stash"
        for alias in node.names
    }
    stand_in = importlib.import_module("fl_patch.impls.cpu.paged_stash_ops")
    assert wanted and all(hasattr(stand_in, name) for name in wanted), wanted
    with pytest.raises(RuntimeError, match="Triton"):
        stand_in.paged_stash_copy_kernel[(1,)](torch.zeros(1))


def test_adam_state_made_by_megatrons_init_state_fn_saves_and_steps(single_rank: None) -> None:
    """megatron's init_state_fn (run before a checkpoint of an optimizer that has not stepped) makes Adam
    state without "step": the distributed optimizer's state_dict and the next step work, and training
    continues exactly as an optimizer that never had it (the state it made is Adam's zeros)."""
    with cpu_pack():

        def build() -> tuple[object, object]:
            ddp = tiny_ddp(tiny_gpt(), distributed_optimizer=True)
            return ddp, optimizer_for(ddp, torch.float32, distributed=True)

        ddp, optimizer = build()
        chained = optimizer.chained_optimizers[0]
        chained.init_state_fn(chained.optimizer, chained.config)
        assert all("step" not in state for state in chained.optimizer.state.values()), "upstream now sets step"
        common = optimizer.state_dict()  # upstream: KeyError 'step' (distrib_optimizer.py, state_dict)
        common = common[0] if 0 in common else common  # a chain of one returns its optimizer's own
        assert {g["step"] for g in common["optimizer"]["param_groups"]} == {0}
        plain, plain_optimizer = build()
        train_step(ddp, optimizer)
        train_step(plain, plain_optimizer)
        for ours, theirs in zip(ddp.module.parameters(), plain.module.parameters(), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_cpu_view_of_torch_forwards_everything_and_maps_only_cuda() -> None:
    from fl_patch.impls.cpu.torch_view import CPU_TORCH, CPU_TORCH_ONE_DEVICE

    assert CPU_TORCH.float32 is torch.float32 and CPU_TORCH.nn is torch.nn and CPU_TORCH.Tensor is torch.Tensor
    assert CPU_TORCH.distributed is torch.distributed
    for device in ("cuda", "cuda:1", torch.device("cuda", 0), 0):
        assert CPU_TORCH.zeros(2, device=device).device.type == "cpu"
    assert CPU_TORCH.empty(2, device="meta").device.type == "meta"  # other devices are left alone
    assert CPU_TORCH.tensor([1.0], dtype=torch.float16).dtype is torch.float16
    assert not CPU_TORCH.cuda.is_available() and CPU_TORCH.cuda.device_count() == 0
    assert CPU_TORCH_ONE_DEVICE.cuda.is_available() and CPU_TORCH_ONE_DEVICE.cuda.device_count() == 1
    assert CPU_TORCH_ONE_DEVICE.ones(1, device=CPU_TORCH_ONE_DEVICE.cuda.current_device()).device.type == "cpu"
    with CPU_TORCH.autocast("cuda", dtype=torch.bfloat16):
        assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype is torch.bfloat16

    # The "CUDA" generator is the CPU default generator, for real.
    CPU_TORCH.cuda.manual_seed(5)
    drawn = torch.rand(3)
    assert torch.equal(drawn, torch.rand(3, generator=torch.Generator().manual_seed(5)))
    state = CPU_TORCH.cuda.get_rng_state()
    first = torch.rand(3)
    CPU_TORCH.cuda.set_rng_state(state)
    assert torch.equal(first, torch.rand(3))

    # What the view does not list is the real torch.cuda: an uncovered CUDA call still fails loudly.
    assert CPU_TORCH.cuda.OutOfMemoryError is torch.cuda.OutOfMemoryError
    with pytest.raises((AssertionError, RuntimeError)):
        CPU_TORCH.cuda.get_device_properties(0)
    # Global torch is never changed.
    assert not torch.cuda.is_available()
    with pytest.raises((AssertionError, RuntimeError)):
        torch.zeros(1, device="cuda")


def test_upstream_code_compiled_by_torch_compile_traces_through_the_view(megatron_core: object) -> None:
    """megatron's jit_fuser (torch.compile) functions read the module's name `torch`: the view."""
    from megatron.core.transformer import utils

    from fl_patch.impls.cpu.torch_view import CpuTorchView

    with cpu_pack():
        assert isinstance(utils.torch, CpuTorchView)
        gelu = utils.gelu_impl.__wrapped__  # the function jit_fuser compiles (torch's and the deferred compile's)
        torch._dynamo.reset()
        compiled = torch.compile(gelu, backend="eager", fullgraph=True)
        x = torch.linspace(-3, 3, 7)
        expected = 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)))
        torch.testing.assert_close(compiled(x), expected)
    assert utils.torch is torch  # uninstall put the real one back


def test_torch_compile_of_a_function_compiles_once_at_its_first_call_as_torch_would(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch._dynamo.testing import CompileCounter

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2 + 1

    x = torch.linspace(-2, 2, 9)
    with cpu_pack():
        assert torch.compile is not fl_patch.original("torch.compile")
        counter = CompileCounter()
        compiled = torch.compile(scaled, backend=counter, fullgraph=True)
        assert compiled.__wrapped__ is scaled and compiled.__name__ == "scaled"
        assert counter.frame_count == 0
        torch.testing.assert_close(compiled(x), scaled(x))
        torch.testing.assert_close(compiled(x + 1), scaled(x + 1))
        assert counter.frame_count == 1  # compiled once, then its graph reused (as torch's compiled function)

        # the decorator with arguments
        decorated_counter = CompileCounter()

        @torch.compile(backend=decorated_counter, fullgraph=True)
        def cubed(y: torch.Tensor) -> torch.Tensor:
            return y * y * y

        torch.testing.assert_close(cubed(x), x**3)
        assert decorated_counter.frame_count == 1

        # called from an outer compiled function: dynamo inlines it (one frame, the outer's; fullgraph: no break)
        inner_counter, outer_counter = CompileCounter(), CompileCounter()
        inner = torch.compile(scaled, backend=inner_counter)
        outer = torch.compile(lambda y: inner(y) - 1, backend=outer_counter, fullgraph=True)
        torch.testing.assert_close(outer(x), scaled(x) - 1)
        assert (outer_counter.frame_count, inner_counter.frame_count) == (1, 0)
        # the same once the inner function has been compiled by a call of its own
        called_counter, around_counter = CompileCounter(), CompileCounter()
        called = torch.compile(scaled, backend=called_counter)
        torch.testing.assert_close(called(x), scaled(x))
        around = torch.compile(lambda y: called(y) * 3, backend=around_counter, fullgraph=True)
        torch.testing.assert_close(around(x), scaled(x) * 3)
        assert (around_counter.frame_count, called_counter.frame_count) == (1, 1)

        # four threads at their first call together: torch's compile is asked once (what dynamo then traces per
        # thread is dynamo's own concurrency, as for any compiled function)
        from fl_patch.impls.cpu import lazy_compile

        asked: list[object] = []
        torchs = lazy_compile._torch_compile

        def counting() -> object:
            asked.append(torchs())
            return asked[-1]

        shared = torch.compile(scaled, backend="eager")
        import threading

        start = threading.Barrier(4)
        results: list[torch.Tensor] = []

        def first_call() -> None:
            start.wait()
            results.append(shared(x))

        monkeypatch.setattr(lazy_compile, "_torch_compile", counting)
        threads = [threading.Thread(target=first_call) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        monkeypatch.undo()
        assert len(results) == 4 and len(asked) == 1
        for result in results:
            torch.testing.assert_close(result, scaled(x))

        # what torch returns at once still comes at once: a module's OptimizedModule, torch's refusal
        module = torch.nn.Linear(3, 3)
        assert isinstance(torch.compile(module, backend="eager"), torch._dynamo.eval_frame.OptimizedModule)
        with pytest.raises(RuntimeError, match="Either mode or options"):
            torch.compile(scaled, mode="max-autotune", options={"trace.enabled": False})
        refusing = torch.compile(mode="max-autotune", options={"trace.enabled": False})  # torch: refused when applied
        with pytest.raises(RuntimeError, match="Either mode or options"):
            refusing(scaled)
    assert torch.compile.__code__.co_filename == torch.__file__  # uninstalled: torch's own again


DEFERRED_COMPILE_PROBE = """
import json, sys
import fl_patch
fl_patch.install()
import torch
from megatron.core.models.gpt.gpt_model import GPTModel
import megatron.core.optimizer, megatron.core.jit as jit
from megatron.core.transformer import utils
loaded_at_import = "torch._dynamo" in sys.modules
x = torch.linspace(-3, 3, 7)
out = utils.gelu_impl(x)  # a @jit_fuser function (TORCHDYNAMO_DISABLE=1: compiled, it runs as written)
expected = 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * x * (1.0 + 0.044715 * x * x)))
print("RESULT" + json.dumps({
    "loaded_at_import": loaded_at_import,
    "loaded_after_call": "torch._dynamo" in sys.modules,
    "jit_fuser": jit.jit_fuser.__code__.co_filename.rsplit("/", 1)[-1],
    "right": bool(torch.allclose(out, expected)),
}))
"""


@pytest.mark.parametrize(
    ("disabled", "want"),
    [
        # the pack: jit_fuser returns the function as written; nothing loads the compiler, not even the call
        ("", {"loaded_at_import": False, "loaded_after_call": False, "jit_fuser": "fusions.py"}),
        # jit_fuser upstream's torch.compile again: compiled at the first call (lazy_compile), not at import
        ("megatron.core.jit.jit_fuser", {"loaded_at_import": False, "loaded_after_call": True,
                                         "jit_fuser": "lazy_compile.py"}),
        # both out: upstream's, the compiler loaded by the import itself
        ("megatron.core.jit.jit_fuser,torch.compile", {"loaded_at_import": True, "loaded_after_call": True,
                                                       "jit_fuser": "__init__.py"}),
    ],
    ids=["pack", "compiled_at_first_call", "upstream"],
)  # fmt: skip
def test_importing_megatron_compiles_nothing_until_a_compiled_function_is_called(run_python, disabled, want) -> None:
    """Megatron's @jit_fuser functions run as written on a CPU (no compiler loaded); without that patch, the
    import-time torch.compile calls still load no compiler until the first call; without either, upstream's."""
    from ..conftest import clean_env

    env = clean_env(TORCHDYNAMO_DISABLE="1", **({"FL_PATCH_DISABLE": disabled} if disabled else {}))
    proc = run_python("-c", DEFERRED_COMPILE_PROBE, env=env, timeout=120)
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert json.loads(line[len("RESULT") :]) == {**want, "right": True}


# --------------------------------------------------------------------------- fresh processes
PROBE = """
import json, sys
import fl_patch.impls.cpu.registry
fl_patch.impls.cpu.registry.register_pack()
imported_at_registry = sorted(m for m in ("torch", "megatron", "megatron.core") if m in sys.modules)
import fl_patch
fl_patch.install()
import megatron.core.tensor_parallel.random as tp_random
chosen = {r.target: r.chosen_vendor for r in fl_patch.report() if r.vendor == "cpu"}
print("RESULT" + json.dumps({
    "imported_at_registry": imported_at_registry,
    "view": type(tp_random.torch).__name__,
    "vendor": chosen["megatron.core.tensor_parallel.random.torch"],
}))
"""


def _probe(run_python, **env: str) -> tuple[dict, str]:
    from ..conftest import clean_env

    proc = run_python("-c", PROBE, env=clean_env(**env), timeout=120)
    (line,) = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    return json.loads(line[len("RESULT") :]), proc.stderr


def test_pack_is_chosen_without_an_accelerator_and_its_registry_imports_nothing(run_python) -> None:
    result, stderr = _probe(run_python)
    assert result == {"imported_at_registry": [], "view": "CpuTorchView", "vendor": "cpu"}
    assert "verified on" not in stderr
    result, _ = _probe(run_python, MG_FL_PREFER="cpu")
    assert result["vendor"] == "cpu" and result["view"] == "CpuTorchView"


def test_another_megatron_core_release_gets_one_clear_warning(run_python, tmp_path: Path) -> None:
    """A megatron-core the pack was not verified on: it still applies, and says so once."""
    from ..conftest import support_pythonpath

    dist_info = tmp_path / "megatron_core-0.99.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: megatron-core\nVersion: 0.99.0\n")
    (dist_info / "RECORD").write_text("")
    pythonpath = support_pythonpath(tmp_path)
    result, stderr = _probe(run_python, PYTHONPATH=pythonpath)
    assert result["view"] == "CpuTorchView"
    warnings_seen = [line for line in stderr.splitlines() if "is not a release it was verified on" in line]
    assert len(warnings_seen) == 1, stderr
    assert "megatron-core 0.99.0" in warnings_seen[0] and "0.19.2" in warnings_seen[0]
