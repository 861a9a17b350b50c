"""Transformer Engine's layer modules, in plain torch, for megatron-core's TE layer spec where TE is absent.

Why: ``TransformerConfig.transformer_impl`` defaults to ``"transformer_engine"``, and
Megatron-LM's ``pretrain_gpt.py``, NeMo, Megatron-Bridge and FlagScale recipes build
``get_gpt_layer_with_transformer_engine_spec()``. Without TE, megatron-core 0.19.2 binds
``TESpecProvider = None`` (``gpt_layer_specs.py`` line 54) and its TE wrappers
(``extensions/transformer_engine.py``) subclass a ``MagicMock``: the spec cannot be built.
Mapping the TE spec to the local spec (what the CUDA-on-CPU transfer did before) changes the
module tree: ``self_attention.linear_qkv.layer_norm_weight`` becomes
``input_layernorm.weight``, so code and tools that address TE's modules break, and the
per-module parameter counts differ from a TE run's.

How: one class per TE wrapper megatron-core's TE spec uses, with the wrapper's constructor
signature, forward contract and parameter names, built on megatron-core's own tensor-parallel
layers and mappings (so TP, sequence parallelism, expert parallelism, initialisation and
``sharded_state_dict`` are megatron's):

- :class:`TELayerNormColumnParallelLinear`: ``layer_norm_weight`` (+ ``layer_norm_bias`` for
  LayerNorm), ``weight``, ``bias``, ``_extra_state``; the norm runs on the local sequence
  shard, then megatron's ``ColumnParallelLinear`` (which all-gathers under sequence parallelism).
- :class:`TEColumnParallelLinear`, :class:`TERowParallelLinear`: megatron's column/row layers
  with TE's constructor (``gather_output=True``, ``input_is_parallel=False`` refused, as TE does).
- :class:`TELinear`: ``parallel_mode="duplicated"`` (MLA's down projections, MoE latent
  projections): a replicated weight, gradients reduced like TE's.
- :class:`TENorm`: LayerNorm / RMSNorm with ``weight`` (+ ``bias``), zero-centred gamma.
- :class:`TEDotProductAttention`: ``torch.nn.functional.scaled_dot_product_attention`` (GQA,
  causal / padding masks, separate k and v head sizes for MLA, dropout on megatron's RNG tracker).
- :class:`TEColumnParallelGroupedLinear`, :class:`TERowParallelGroupedLinear`: TE's
  ``GroupedLinear`` (``weight0``..``weightN-1``) for ``TEGroupedMLP`` (``moe_grouped_gemm``), with
  the per-expert ``sharded_state_dict`` that makes it interchangeable with ``SequentialMLP``'s.
- :class:`TESpecProvider`: megatron's ``BackendSpecProvider`` returning these.

The maths goes through three module-level functions, :func:`norm`, :func:`attention` and
:func:`grouped_matmul`: a pack with kernels (the FlagGems GPU pack) registers its own impl for
them (``fl_patch.impls.te.modules.norm`` is an fl_patch target like any other) and every
module above runs on it. fp8 goes through :func:`fp8_layer`, which a pack with fp8 GEMMs replaces (the FlagGems
pack's ``fp8.py``); here it needs TE. ``TELayerNormColumnParallelLinear`` normalizes through
:func:`linear_input_norm` (:func:`norm`, told which linear the result feeds), which such a pack replaces to prepare
the linear's fp8 cast in the norm kernel (``fp8_norm.py``). TE-only features (fp8 without such a pack, fp4, TP communication overlap,
delayed wgrad, symmetric all-reduce, fused residual RMSNorm, context parallelism, THD packed sequences) raise
:class:`TEFeatureError`, naming the feature: never a silent plain-precision run.

Upstream reference: megatron-core 0.19.2, ``megatron/core/extensions/transformer_engine.py``
(the wrappers' signatures and ``sharded_state_dict``), ``transformer_engine_spec_provider.py``,
``models/gpt/gpt_layer_specs.py`` (the parameter names in its ``sharded_state_dict_keys_map``).
Drop when: Transformer Engine (or TransformerEngine-FL) is installed: the registrations are
made only where ``transformer_engine`` cannot be found (``te_registry.py``).
"""

from __future__ import annotations

import inspect
import io
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core.dist_checkpointing.utils import replace_prefix_for_sharding
from megatron.core.extensions.transformer_engine import TENorm as _UpstreamTENorm
from megatron.core.extensions.transformer_engine_spec_provider import TESpecProvider as _UpstreamTESpecProvider
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.tensor_parallel.random import (
    get_cuda_rng_tracker,
    get_data_parallel_rng_tracker_name,
    get_expert_parallel_rng_tracker_name,
)
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.mlp import MLPSubmodules
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.moe.experts import GroupedMLPSubmodules, SequentialMLP, TEGroupedMLP
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.utils import ensure_metadata_has_dp_cp_group, make_sharded_tensors_for_checkpoint
from megatron.core.utils import divide, get_pg_rank, get_pg_size, get_tensor_model_parallel_group_if_none

from fl_patch.impls._compat import warn_if_unverified

__all__ = [
    "TEColumnParallelGroupedLinear",
    "TEColumnParallelLinear",
    "TEDotProductAttention",
    "TEFeatureError",
    "TELayerNormColumnParallelLinear",
    "TELinear",
    "TENorm",
    "TERowParallelGroupedLinear",
    "TERowParallelLinear",
    "TESpecProvider",
    "TransformerBlockNorm",
    "attention",
    "fp8_layer",
    "grouped_matmul",
    "linear_input_norm",
    "norm",
    "per_expert_matmul",
]

warn_if_unverified()


class TEFeatureError(ValueError):
    """A Transformer Engine-only feature was asked for where fl_patch's TE-compatible modules run."""


def _release_options(base_init: Callable, **options: object) -> dict[str, object]:
    """``options`` the installed release's ``base_init`` takes (megatron's layers gained ``name`` in 0.18).

    One it lacks is dropped when unset (None): that release's callers never pass it; set, it is an error
    naming it, never dropped silently.
    """
    takes = inspect.signature(base_init).parameters
    unknown = [name for name, value in options.items() if name not in takes and value is not None]
    if unknown:
        raise TypeError(f"{base_init.__qualname__} of the installed megatron-core takes no {', '.join(unknown)}")
    return {name: value for name, value in options.items() if name in takes}


# --------------------------------------------------------------------------- refusing TE-only features
def _refuse(where: str, config: Any, **requested: object) -> None:
    """One clear error naming every TE-only feature the config (or the caller) asks for."""
    gtp = getattr(config, "gtp_weight_remat_size", None) or 1  # (main) generalized TP's weight rematerialisation
    features = {  # (fp8: fp8_layer below, which a pack with fp8 GEMMs replaces)
        "fp4": getattr(config, "fp4", None),
        "tp_comm_overlap": getattr(config, "tp_comm_overlap", False),
        "delay_wgrad_compute": getattr(config, "delay_wgrad_compute", False),
        "gtp_weight_remat_size": gtp if gtp > 1 else None,
        **requested,
    }
    asked = [f"{name}={value!r}" for name, value in features.items() if value]
    if asked:
        raise TEFeatureError(
            f"{where}: {', '.join(asked)} needs Transformer Engine, which is not installed; fl_patch's "
            "TE-compatible modules (fl_patch/impls/te/modules.py, docs/te_spec.md) run TE's layer spec "
            "in plain torch without it"
        )


# --------------------------------------------------------------------------- the maths (pack hooks)
def fp8_layer(config: Any, layer: torch.nn.Module, num_gemms: int = 1) -> Any:
    """The fp8 state of a linear layer built for ``config``: None where ``config.fp8`` is unset.

    A pack with fp8 GEMMs replaces this (the FlagGems pack: ``fl_patch.impls.flaggems.fp8.fp8_layer``) and returns
    an object the linears call: ``takes(x, weight)``, ``linear(module, x, weight, **megatron's kwargs)``,
    ``grouped(module, x, weights, splits)``, ``get_extra_state()``, ``set_extra_state(state)``. Here fp8 needs TE.
    """
    if getattr(config, "fp8", None):
        raise TEFeatureError(
            f"{type(layer).__name__}: fp8={config.fp8!r} needs Transformer Engine, which is not installed; fl_patch's "
            "TE-compatible modules (fl_patch/impls/te/modules.py, docs/te_spec.md) serve fp8 on the FlagGems GPU "
            "pack only (MG_FL_PREFER=flaggems, docs/gpu_pack.md)"
        )
    return None


def norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float, rms: bool, zero_centered_gamma: bool
) -> torch.Tensor:
    """LayerNorm / RMSNorm over the last dimension, as TE computes them (gamma stored as gamma-1 when zero-centred)."""
    gamma = weight + 1 if zero_centered_gamma else weight
    if rms:
        return F.rms_norm(x, (x.shape[-1],), gamma, eps)
    return F.layer_norm(x, (x.shape[-1],), gamma, bias, eps)


def linear_input_norm(
    linear: torch.nn.Module,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    eps: float,
    rms: bool,
    zero_centered_gamma: bool,
) -> torch.Tensor:
    """The norm of ``TELayerNormColumnParallelLinear``, whose result ``linear`` consumes: :func:`norm` (whichever is
    installed). A pack that prepares the linear's use of it replaces this, not :func:`norm`, so a plugin's own
    ``norm`` keeps its signature and still serves every other call (the FlagGems pack's fp8 cast:
    ``fl_patch.impls.flaggems.fp8_norm.linear_input_norm``)."""
    return norm(x, weight, bias, eps, rms, zero_centered_gamma)


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
    dropout_p: float,
    scale: float,
) -> torch.Tensor:
    """Attention on ``[b, heads, s, d]`` tensors; ``mask`` is SDPA's (True = attend); GQA by head groups."""
    return F.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=mask,
        dropout_p=dropout_p,
        is_causal=causal and mask is None,
        scale=scale,
        enable_gqa=key.shape[1] != query.shape[1],
    )


def grouped_matmul(x: torch.Tensor, weights: list[torch.Tensor], splits: list[int]) -> torch.Tensor:
    """``x`` split by rows into ``splits``, each part times ``weights[i].T``, concatenated (TE's grouped GEMM)."""
    return per_expert_matmul(x, weights, splits)


def per_expert_matmul(x: torch.Tensor, weights: list[torch.Tensor], splits: list[int]) -> torch.Tensor:
    """One GEMM per expert: :func:`grouped_matmul`'s maths under a name no pack replaces (a pack's grouped
    kernel checks itself against it)."""
    parts = torch.split(x, splits)
    return torch.cat([part @ weight.t() for part, weight in zip(parts, weights, strict=True)])


# --------------------------------------------------------------------------- norms
class _Norm(torch.nn.Module):
    """TE's ``LayerNorm`` / ``RMSNorm``: parameters ``weight`` (and ``bias``), ``sequence_parallel`` marked."""

    def __init__(
        self,
        hidden_size: int,
        eps: float,
        rms: bool,
        zero_centered_gamma: bool,
        sequence_parallel: bool,
        dtype: torch.dtype,
    ) -> None:
        super().__init__()
        self.eps, self.rms, self.zero_centered_gamma = eps, rms, zero_centered_gamma
        init = torch.zeros if zero_centered_gamma else torch.ones
        self.weight = torch.nn.Parameter(init(hidden_size, dtype=dtype))
        self.bias = None if rms else torch.nn.Parameter(torch.zeros(hidden_size, dtype=dtype))
        for param in self.parameters():
            # The norm runs on each rank's sequence shard: its gradient is summed over TP (as TE marks it).
            param.sequence_parallel = sequence_parallel  # type: ignore[attr-defined]  # megatron's parameter mark

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return norm(x, self.weight, self.bias, self.eps, self.rms, self.zero_centered_gamma)


class TENorm(_UpstreamTENorm):
    """``megatron.core.extensions.transformer_engine.TENorm``: a LayerNorm or RMSNorm by ``config.normalization``.

    A subclass of upstream's (a plain class whose ``__new__`` builds TE's norm) only because fl_patch requires a
    class to replace a class, where megatron binds upstream's unconditionally (``hybrid_layer_specs``, ``llava_spec``).
    """

    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, has_residual: bool = False) -> Any:
        if config.fused_residual_rmsnorm and has_residual:
            _refuse("TENorm", config, fused_residual_rmsnorm=True)
        if config.normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(f"TENorm: normalization={config.normalization!r}; only LayerNorm and RMSNorm exist")
        return _Norm(
            hidden_size,
            eps,
            config.normalization == "RMSNorm",
            config.layernorm_zero_centered_gamma,
            config.sequence_parallel,
            config.params_dtype,
        )


class TransformerBlockNorm(WrappedTorchNorm):
    """``TransformerBlock``'s final norm as with TE (``LayerNormImpl = TENorm``); a subclass of the torch norm it
    replaces there only because fl_patch requires a class to replace a class (that norm, like TE's, returns
    a module of another class from ``__new__``)."""

    # *_args: the torch norm's own positional arguments (persist_layer_norm, zero_centered_gamma, normalization),
    # which TENorm reads from the config as TE does.
    def __new__(cls, config: Any, hidden_size: int, eps: float = 1e-5, *_args: Any, **_: Any) -> Any:
        return TENorm(config, hidden_size, eps)


# --------------------------------------------------------------------------- linears
class _ExtraState:
    """TE modules carry ``_extra_state`` (fp8 metadata): a layer running fp8 (``_fl_fp8``) saves and loads its own in
    TE's layout; without fp8 there is none to carry, and a TE checkpoint's is accepted only when it holds no fp8 state
    (else the fp8 scaling would silently be dropped)."""

    _fl_fp8: Any = None  # the pack's fp8 state of this layer (fp8_layer), None in bf16 runs

    def get_extra_state(self) -> Any:
        if self._fl_fp8 is not None:
            return self._fl_fp8.get_extra_state()
        return None

    def set_extra_state(self, state: Any) -> None:
        if self._fl_fp8 is not None:
            self._fl_fp8.set_extra_state(state)
            return
        if state is None or (isinstance(state, torch.Tensor) and state.numel() == 0):
            return
        if isinstance(state, io.BytesIO) and not state.getbuffer().nbytes:  # older TE's empty state
            return
        raise TEFeatureError(
            f"{type(self).__name__}: the checkpoint holds Transformer Engine fp8 state ({type(state).__name__}); "
            "loading it without TE would drop the fp8 scaling factors"
        )


def _no_expert_tp_comm(layer: ColumnParallelLinear | RowParallelLinear) -> None:
    """An expert linear communicates nothing itself, as TE's (the token dispatcher moves tokens over EP/ETP).

    megatron's local layers skip the TP mapping only with TP or EP > 1; at TP = EP = 1 the mapping is an
    identity autograd Function returning its input as a view, and ``MLP.forward``'s in-place
    ``output += bias * scale`` (SequentialMLP with biases) then raises. TE's output is never such a view."""
    layer.explicit_expert_comm = True


def _attach_fp8(layer: torch.nn.Module, config: Any, num_gemms: int = 1) -> None:
    """Give ``layer`` its fp8 state (:func:`fp8_layer`) and, with it, TE's ``is_first_microbatch`` flag: megatron sets
    it on the first micro-batch of a step (``MegatronModule.set_is_first_microbatch``), when the fp8 weight copy is
    made again; the other micro-batches reuse it."""
    fp8 = fp8_layer(config, layer, num_gemms)
    layer._fl_fp8 = fp8  # (a plain attribute, not a submodule)
    if fp8 is not None:
        # None (no schedule sets it): a fresh fp8 weight copy at every call
        layer.is_first_microbatch = None  # type: ignore[assignment]


class TEColumnParallelLinear(_ExtraState, ColumnParallelLinear):
    """TE's column-parallel linear (``weight`` ``[out/tp, in]``, ``bias``, ``_extra_state``)."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        config: Any,
        init_method: Callable,
        gather_output: bool,
        bias: bool,
        skip_bias_add: bool,
        is_expert: bool,
        skip_weight_param_allocation: bool = False,
        tp_comm_buffer_name: str | None = None,
        tp_group: torch.distributed.ProcessGroup | None = None,
        stride: int = 1,
        name: str | None = None,
        pg_collection: Any = None,  # (main) generalized TP's groups: GTP is refused (_refuse)
    ) -> None:
        _refuse(type(self).__name__, config)
        if gather_output:
            raise ValueError("Transformer Engine linear layers do not support gather_output = True")
        if skip_weight_param_allocation:
            raise ValueError("Transformer Engine linear layers do not support skip_weight_param_allocation")
        super().__init__(
            input_size,
            output_size,
            config=config,
            init_method=init_method,
            bias=bias,
            gather_output=False,
            stride=stride,
            skip_bias_add=skip_bias_add,
            is_expert=is_expert,
            tp_comm_buffer_name=tp_comm_buffer_name,
            tp_group=tp_group,
            **_release_options(ColumnParallelLinear.__init__, name=name),
        )
        if is_expert:
            _no_expert_tp_comm(self)
        _attach_fp8(self, config)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return super().forward(x)

    def _forward_impl(self, input: torch.Tensor, weight: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        fp8 = self._fl_fp8
        if fp8 is not None and not args and fp8.takes(input, weight):
            return fp8.linear(self, input, weight, **kwargs)
        return super()._forward_impl(input, weight, *args, **kwargs)

    def backward_dw(self) -> None:
        """TE's delayed weight-gradient hook: nothing is delayed here (``delay_wgrad_compute`` is refused)."""


class TELayerNormColumnParallelLinear(TEColumnParallelLinear):
    """TE's ``LayerNormLinear``: ``layer_norm_weight`` (+ ``layer_norm_bias``), then the column-parallel linear."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        config: Any,
        init_method: Callable,
        gather_output: bool,
        bias: bool,
        skip_bias_add: bool,
        is_expert: bool,
        skip_weight_param_allocation: bool = False,
        tp_comm_buffer_name: str | None = None,
        tp_group: torch.distributed.ProcessGroup | None = None,
        stride: int = 1,
        name: str | None = None,
        pg_collection: Any = None,  # (main) generalized TP's groups: GTP is refused (_refuse)
    ) -> None:
        if is_expert:
            raise ValueError("Transformer Engine linear layers do not yet support MoE")
        if config.normalization not in ("LayerNorm", "RMSNorm"):
            raise ValueError(f"TELayerNormColumnParallelLinear: normalization={config.normalization!r}")
        super().__init__(
            input_size,
            output_size,
            config=config,
            init_method=init_method,
            gather_output=gather_output,
            bias=bias,
            skip_bias_add=skip_bias_add,
            is_expert=is_expert,
            skip_weight_param_allocation=skip_weight_param_allocation,
            tp_comm_buffer_name=tp_comm_buffer_name,
            tp_group=tp_group,
            stride=stride,
            name=name,
        )
        self.norm_eps = config.layernorm_epsilon
        self.norm_rms = config.normalization == "RMSNorm"
        self.zero_centered_gamma = config.layernorm_zero_centered_gamma
        init = torch.zeros if self.zero_centered_gamma else torch.ones
        self.layer_norm_weight = torch.nn.Parameter(init(input_size, dtype=config.params_dtype))
        self.layer_norm_bias = (
            None if self.norm_rms else torch.nn.Parameter(torch.zeros(input_size, dtype=config.params_dtype))
        )
        for param in (self.layer_norm_weight, self.layer_norm_bias):
            if param is not None:
                param.sequence_parallel = config.sequence_parallel  # type: ignore[attr-defined]  # megatron's parameter mark

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        normed = linear_input_norm(
            self, x, self.layer_norm_weight, self.layer_norm_bias, self.norm_eps, self.norm_rms,
            self.zero_centered_gamma,
        )  # fmt: skip
        return super().forward(normed)


class TERowParallelLinear(_ExtraState, RowParallelLinear):
    """TE's row-parallel linear (``weight`` ``[out, in/tp]``, ``bias`` not split, ``_extra_state``)."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        config: Any,
        init_method: Callable,
        bias: bool,
        input_is_parallel: bool,
        skip_bias_add: bool,
        is_expert: bool,
        tp_comm_buffer_name: str | None = None,
        tp_group: torch.distributed.ProcessGroup | None = None,
        name: str | None = None,
        pg_collection: Any = None,  # (main) generalized TP's groups: GTP is refused (_refuse)
    ) -> None:
        _refuse(type(self).__name__, config)
        if not input_is_parallel:
            raise ValueError("Transformer Engine linear layers do not support input_is_parallel = False")
        super().__init__(
            input_size,
            output_size,
            config=config,
            init_method=init_method,
            bias=bias,
            input_is_parallel=True,
            skip_bias_add=skip_bias_add,
            is_expert=is_expert,
            tp_comm_buffer_name=tp_comm_buffer_name,
            tp_group=tp_group,
            **_release_options(RowParallelLinear.__init__, name=name),
        )
        if is_expert:
            _no_expert_tp_comm(self)
        _attach_fp8(self, config)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return super().forward(x)

    def _forward_impl(self, input: torch.Tensor, weight: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        fp8 = self._fl_fp8
        if fp8 is not None and not args and fp8.takes(input, weight):
            return fp8.linear(self, input, weight, **kwargs)
        return super()._forward_impl(input, weight, *args, **kwargs)

    def backward_dw(self) -> None:
        """TE's delayed weight-gradient hook: nothing is delayed here."""


class TELinear(_ExtraState, MegatronModule):
    """TE's ``Linear`` wrapper with ``parallel_mode="duplicated"``: one full weight, the same on every TP rank."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        *,
        parallel_mode: str | None,
        config: Any,
        init_method: Callable,
        bias: bool,
        skip_bias_add: bool,
        skip_weight_param_allocation: bool,
        tp_comm_buffer_name: str | None = None,
        is_expert: bool = False,
        symmetric_ar_type: str | None = None,
        tp_group: torch.distributed.ProcessGroup | None = None,
        name: str | None = None,
        gtp_remat_group: torch.distributed.ProcessGroup | None = None,
        gtp_replica_group: torch.distributed.ProcessGroup | None = None,  # (main) GTP only: GTP is refused
    ) -> None:
        _refuse("TELinear", config, symmetric_ar_type=symmetric_ar_type, gtp_remat_group=gtp_remat_group)
        if parallel_mode not in (None, "duplicated"):
            # megatron-core's spec builds column/row parallel layers through the classes above.
            raise ValueError(
                f"TELinear(parallel_mode={parallel_mode!r}): use TEColumnParallelLinear / TERowParallelLinear"
            )
        if skip_weight_param_allocation:
            raise ValueError("Transformer Engine linear layers do not support skip_weight_param_allocation")
        super().__init__(config=config)
        self.parallel_mode = None  # TE records the duplicated mode as None (its sharded_state_dict asserts it)
        self.in_features, self.out_features = input_size, output_size
        self.te_return_bias = skip_bias_add and bias
        self.weight = torch.nn.Parameter(torch.empty(output_size, input_size, dtype=config.params_dtype))
        self.bias = torch.nn.Parameter(torch.zeros(output_size, dtype=config.params_dtype)) if bias else None
        if config.perform_initialization:
            tracker = get_cuda_rng_tracker()
            rng = get_expert_parallel_rng_tracker_name() if is_expert else get_data_parallel_rng_tracker_name()
            if not config.use_cpu_initialization and tracker.is_initialized() and rng in tracker.get_states():
                with tracker.fork(rng):  # TE draws a duplicated weight from the data-parallel stream
                    init_method(self.weight)
            else:
                init_method(self.weight)
        for param in self.parameters():
            param.allreduce = not is_expert
            # Replicated over TP: under sequence parallelism each rank saw a shard, so sum the grads over TP.
            param.sequence_parallel = config.sequence_parallel
            param.tensor_model_parallel = False
        self._tp_group = get_tensor_model_parallel_group_if_none(tp_group, is_expert=is_expert)
        _attach_fp8(self, config)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        bias = None if self.te_return_bias else self.bias
        fp8 = self._fl_fp8
        if fp8 is not None and fp8.takes(x, self.weight):
            out = fp8.linear(self, x, self.weight, bias=bias)
        else:
            out = F.linear(x, self.weight, bias)
        return (out, self.bias) if self.te_return_bias else (out, None)

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> Any:
        metadata = ensure_metadata_has_dp_cp_group(metadata)
        state_dict = self.state_dict(prefix="", keep_vars=True)
        return make_sharded_tensors_for_checkpoint(
            state_dict, prefix, None, sharded_offsets, tp_group=self._tp_group, dp_cp_group=metadata["dp_cp_group"]
        )

    def backward_dw(self) -> None:
        """TE's delayed weight-gradient hook: nothing is delayed here."""


# --------------------------------------------------------------------------- attention
class TEDotProductAttention(_ExtraState, MegatronModule):
    """TE's ``DotProductAttention`` wrapper: ``[s, b, heads, d]`` in, ``[s, b, heads * d_v]`` out."""

    def __init__(
        self,
        config: Any,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str,
        attention_dropout: float | None = None,
        softmax_scale: float | None = None,
        k_channels: int | None = None,
        v_channels: int | None = None,
        num_splits: int | None = None,
        cp_comm_type: str | None = "p2p",
        pg_collection: Any = None,
    ) -> None:
        _refuse(
            "TEDotProductAttention",
            config,
            context_parallel_size=config.context_parallel_size if config.context_parallel_size > 1 else 0,
            window_size=config.window_size,
            softmax_type=config.softmax_type if config.softmax_type != "vanilla" else None,
        )
        super().__init__(config=config)
        self.layer_number, self.attn_mask_type, self.attention_type = layer_number, attn_mask_type, attention_type
        self.k_channels = k_channels if k_channels is not None else config.kv_channels
        self.v_channels = v_channels if v_channels is not None else config.kv_channels
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(self.k_channels)
        # apply_query_key_layer_scaling is an fp16 overflow guard that leaves the result unchanged (TE applies
        # it inside its fp32 softmax); SDPA's softmax does not overflow that way, so nothing to do.
        self.current_max_attn_logits = None  # read by MLA's qk-clip
        self.pg_collection = pg_collection
        self._tp_group = getattr(pg_collection, "tp", None)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: AttnMaskType | None = None,
        attention_bias: torch.Tensor | None = None,
        packed_seq_params: Any = None,
        num_splits: int | None = None,
    ) -> torch.Tensor:
        if packed_seq_params is not None:
            _refuse("TEDotProductAttention", self.config, packed_seq_params="thd")
        if attention_bias is not None:
            _refuse("TEDotProductAttention", self.config, attention_bias="core_attention_bias")
        mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
        causal = mask_type in (AttnMaskType.causal, AttnMaskType.padding_causal)
        mask = None
        if mask_type in (AttnMaskType.padding, AttnMaskType.padding_causal, AttnMaskType.arbitrary):
            if attention_mask is not None:
                mask = ~attention_mask  # megatron: True = masked out; SDPA: True = attend
                if causal:
                    sq, sk = query.shape[0], key.shape[0]
                    mask = mask & torch.ones(sq, sk, dtype=torch.bool, device=query.device).tril(sk - sq)
        # [s, b, h, d] -> [b, h, s, d]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        p = self.dropout_p if self.training else 0.0
        if p > 0.0:
            with get_cuda_rng_tracker().fork():  # attention dropout is drawn per TP rank, as in megatron
                out = attention(q, k, v, mask, causal, p, self.softmax_scale)
        else:
            out = attention(q, k, v, mask, causal, 0.0, self.softmax_scale)
        b, h, s, d = out.shape
        return out.permute(2, 0, 1, 3).reshape(s, b, h * d)

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> Any:
        # As TE's wrapper: nothing of the core attention is checkpointed unless the softmax offset is learnable.
        return {}

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # The dist checkpoint holds no core-attention state (sharded_state_dict above), so the state dict megatron
        # loads from one lacks this module's _extra_state; TE's DotProductAttention drops that key from the
        # missing ones, and a strict load_state_dict of a TE-spec model must pass here as it does with TE.
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        own_key = prefix + torch.nn.modules.module._EXTRA_STATE_KEY_SUFFIX
        if own_key not in state_dict and own_key in missing_keys:
            missing_keys.remove(own_key)


# --------------------------------------------------------------------------- grouped linears (MoE)
class _GroupedLinear(_ExtraState, torch.nn.Module):
    """TE's ``GroupedLinear`` for ``TEGroupedMLP``: ``weight0``..``weight{N-1}`` (+ ``bias{i}``), local GEMMs only.

    As in TE with ``is_expert``, the expert-parallel / expert-TP communication is the token dispatcher's;
    these layers hold this rank's experts and this rank's TP slice of each."""

    parallel_mode = "column"

    def __init__(
        self,
        num_gemms: int,
        input_size: int,
        output_size: int,
        *,
        config: Any,
        init_method: Callable,
        bias: bool,
        skip_bias_add: bool,
        is_expert: bool,
        tp_comm_buffer_name: str | None = None,
        pg_collection: Any = None,
        name: str | None = None,
    ) -> None:
        _refuse(type(self).__name__, config)
        super().__init__()
        self.config, self.num_gemms, self.use_bias = config, num_gemms, bias
        self.te_return_bias = skip_bias_add and bias
        self._pg_collection = pg_collection
        self._tp_group = pg_collection.expt_tp
        tp_size = get_pg_size(self._tp_group)
        if self.parallel_mode == "column":
            output_size = divide(output_size, tp_size)
        else:
            input_size = divide(input_size, tp_size)
        self.in_features, self.out_features = input_size, output_size
        tracker = get_cuda_rng_tracker()
        rng = get_expert_parallel_rng_tracker_name()
        for i in range(num_gemms):
            weight = torch.nn.Parameter(torch.empty(output_size, input_size, dtype=config.params_dtype))
            if config.perform_initialization:
                if tracker.is_initialized() and rng in tracker.get_states():
                    with tracker.fork(rng):
                        init_method(weight)
                else:
                    init_method(weight)
            self.register_parameter(f"weight{i}", weight)
            if bias:
                self.register_parameter(
                    f"bias{i}", torch.nn.Parameter(torch.zeros(output_size, dtype=config.params_dtype))
                )
        use_expert_pgs = (
            config.expert_model_parallel_size > 1
            or config.expert_tensor_parallel_size != config.tensor_model_parallel_size
        )
        for pname, param in self.named_parameters():
            # megatron's parameter marks (read by its grad reduction and checkpointing), set as TE sets them
            param.allreduce = not use_expert_pgs  # type: ignore[attr-defined]
            split = pname.startswith("weight") or (self.parallel_mode == "column" and pname.startswith("bias"))
            param.tensor_model_parallel = split  # type: ignore[attr-defined]
            if split:
                param.partition_dim = 1 if self.parallel_mode == "row" else 0  # type: ignore[attr-defined]
                param.partition_stride = 1  # type: ignore[attr-defined]
        _attach_fp8(self, config, num_gemms)

    def forward(self, x: torch.Tensor, m_splits: list[int]) -> tuple[torch.Tensor, torch.Tensor | list | None]:
        weights = [getattr(self, f"weight{i}") for i in range(self.num_gemms)]
        fp8 = self._fl_fp8
        if fp8 is not None and fp8.takes_grouped(x, weights[0], list(m_splits)):
            out = fp8.grouped(self, x, weights, list(m_splits))
        else:
            out = grouped_matmul(x, weights, list(m_splits))
        biases = [getattr(self, f"bias{i}") for i in range(self.num_gemms)] if self.use_bias else None
        if biases is not None and self.te_return_bias:
            return out, biases  # TEGroupedMLP applies them, weighted by the routing probabilities
        if biases is not None:
            out = out + torch.cat([b.expand(n, -1) for b, n in zip(biases, m_splits, strict=True)])
        return out, None

    def sharded_state_dict(self, prefix: str = "", sharded_offsets: tuple = (), metadata: dict | None = None) -> Any:
        """Per-expert tensors at their global expert index: the keys ``SequentialMLP`` writes (TE's layout)."""
        metadata = ensure_metadata_has_dp_cp_group(metadata)
        singleton_local_shards = metadata.get("singleton_local_shards", False)
        tp_axis_map = {"weight": 0, "bias": 0} if self.parallel_mode == "column" else {"weight": 1}
        ep = self._pg_collection.ep
        num_global = get_pg_size(ep) * self.num_gemms
        offset = get_pg_rank(ep) * self.num_gemms
        ep_axis = len(sharded_offsets)
        sharded: dict[str, Any] = {}
        for i in range(self.num_gemms):
            index = offset + i
            state = {f"{i}.weight": getattr(self, f"weight{i}"), f"{i}._extra_state": None}
            if self.use_bias:
                state[f"{i}.bias"] = getattr(self, f"bias{i}")
            if singleton_local_shards:
                expert_prefix, offsets = f"{index}.{prefix}", sharded_offsets
            else:
                expert_prefix, offsets = prefix, (*sharded_offsets, (ep_axis, index, num_global))
            sub = make_sharded_tensors_for_checkpoint(
                state, "", tp_axis_map, offsets, tp_group=self._tp_group, dp_cp_group=metadata["dp_cp_group"]
            )
            replace_prefix_for_sharding(sub, f"{i}.", expert_prefix)
            sharded[f"{prefix}weight{i}"] = sub[f"{i}.weight"]
            sharded[f"{prefix}_extra_state{'' if i == 0 else i}"] = sub[f"{i}._extra_state"]
            if self.use_bias:
                sharded[f"{prefix}bias{i}"] = sub[f"{i}.bias"]
        expt_dp_rank = get_pg_rank(self._pg_collection.expt_dp)
        for entry in sharded.values():
            entry.replica_id = (*entry.replica_id[:2], expt_dp_rank)
        return sharded

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # A dist checkpoint carries one _extra_state per expert (_extra_state1.. beside _extra_state, the keys above);
        # the module has one. megatron's TE grouped linear merges them into it at load; each must be empty here.
        for i in range(1, self.num_gemms):
            key = f"{prefix}_extra_state{i}"
            if key in state_dict:
                self.set_extra_state(state_dict.pop(key))
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def backward_dw(self) -> None:
        """TE's delayed weight-gradient hook: nothing is delayed here."""


class TEColumnParallelGroupedLinear(_GroupedLinear):
    """TE's column-parallel ``GroupedLinear`` (the experts' fc1)."""

    parallel_mode = "column"


class TERowParallelGroupedLinear(_GroupedLinear):
    """TE's row-parallel ``GroupedLinear`` (the experts' fc2)."""

    parallel_mode = "row"


# --------------------------------------------------------------------------- the spec provider
class _TENormWithResidual:
    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # (megatron passes config, hidden_size[, eps]: args never reach has_residual)
        return TENorm(*args, has_residual=True, **kwargs)  # type: ignore[misc]


class TESpecProvider(_UpstreamTESpecProvider):
    """megatron-core's ``TESpecProvider`` with the modules above (no TE version gates: none is installed)."""

    def linear(self) -> type:
        return TELinear

    def column_parallel_linear(self) -> type:
        return TEColumnParallelLinear

    def row_parallel_linear(self) -> type:
        return TERowParallelLinear

    def fuse_layernorm_and_linear(self) -> bool:
        return True

    def column_parallel_layer_norm_linear(self) -> type | None:
        return TELayerNormColumnParallelLinear

    def layer_norm(self, rms_norm: bool = False, for_qk: bool = False, has_residual: bool = False) -> Any:
        return _TENormWithResidual if has_residual else TENorm

    def core_attention(self) -> type:
        return TEDotProductAttention

    def grouped_mlp_modules(self, moe_use_grouped_gemm: bool) -> Any:
        if moe_use_grouped_gemm:
            return partial(
                TEGroupedMLP,
                submodules=GroupedMLPSubmodules(
                    linear_fc1=TEColumnParallelGroupedLinear,
                    linear_fc2=TERowParallelGroupedLinear,
                    activation_func=None,
                ),
            )
        return partial(
            SequentialMLP,
            submodules=MLPSubmodules(
                linear_fc1=TEColumnParallelLinear, linear_fc2=TERowParallelLinear, activation_func=None
            ),
        )

    def activation_func(self) -> Any:
        # TE's activation ops (use_te_activation_func) are TE-only; megatron's own activation runs instead.
        return None
