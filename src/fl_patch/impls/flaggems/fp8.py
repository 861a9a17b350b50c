"""fp8 training without Transformer Engine: megatron's fp8 options served by the TE-compatible layers.

Why: megatron-core enters fp8 only through TE. ``--fp8-format``/``--fp8-recipe`` (``config.fp8``,
``config.fp8_recipe``) make ``TransformerBlock`` wrap each layer in
``fp8_utils.get_fp8_context(...)``, which calls ``transformer_engine.pytorch.fp8_autocast`` with a
TE recipe object (``get_fp8_recipe``); TE's linear modules then run their GEMMs in fp8. Without TE,
``get_fp8_context`` returns ``nullcontext()`` and fl_patch's TE-compatible layers
(``fl_patch/impls/te/modules.py``) refused ``fp8``. On a Hopper GPU torch has the fp8 GEMM
(``torch._scaled_mm``): the rest is the recipe, which is small.

How (vendor ``flaggems``, only where TE is absent; ``registry.py``):
- ``megatron.core.fp8_utils.get_fp8_context`` / ``get_fp8_recipe`` -> :func:`get_fp8_context` /
  :func:`get_fp8_recipe`: the same decisions as megatron's TE branch (no context for bf16 runs and
  for ``first_last_layers_bf16`` layers), with this module's :class:`Autocast` in place of
  ``fp8_autocast``. At model build (``is_init=True``) every fp8 option is read by name
  (:func:`recipe_for`): served, or refused with one error naming it (``TEFeatureError``); a layer
  built under fp8 with no fp8-capable linear in it (the local spec) is refused too.
- ``te_modules.fp8_layer`` -> :func:`fp8_layer`: each TE-compatible linear (column, row,
  layernorm-column, duplicated, grouped) gets a :class:`LinearFp8`, which runs its forward, dgrad
  and wgrad GEMMs in fp8 while an :class:`Autocast` is active: inputs and weights e4m3, output
  gradients e5m2 (``hybrid``) or e4m3 (``e4m3``); fp32 accumulation, bf16 outputs, the weight
  gradient added into megatron's fp32 ``main_grad`` (``gradient_accumulation_fusion``). Weights stay
  bf16 parameters with megatron's fp32 master copies; their fp8 copy is made on the first
  micro-batch of a step and kept for the others (megatron's ``set_is_first_microbatch``, as TE).
- Recipes: ``tensorwise`` (per-tensor current scaling: each tensor's own amax), ``delayed`` (the
  amax history: ``fp8_amax_history_len``, ``fp8_amax_compute_algo``, ``fp8_margin``, in TE's layout,
  saved and loaded through ``_extra_state`` as TE saves it), ``blockwise`` (1x128 activation and
  gradient tiles, 128x128 weight blocks, power-of-two scales: DeepSeek-V3's; Hopper only, checked
  on the device before it is trusted).
- What stays bf16, and why: core attention (cuDNN's bf16 fused attention; fp8 attention is TE's
  ``fp8_dot_product_attention``, refused), norms, SwiGLU, RoPE, softmax, the embedding and the output
  layer (megatron builds them outside the TE layers, as with TE), the MoE router; the optimizer
  keeps fp32 masters.

Differences from TE, by design: no amax all-reduce across ranks (``fp8_group``): each rank scales
from its own tensors, which changes no GEMM's correctness, only which scale each rank picks; under
``delayed`` a weight is scaled by its own amax when it is cast (once a step), its history slot
recorded for checkpoints.

Upstream reference: megatron-core 0.19.2 ``fp8_utils.py`` (``get_fp8_recipe``, ``get_fp8_context``,
``is_first_last_bf16_layer``), ``transformer/transformer_block.py``, ``extensions/transformer_engine.py``;
Transformer Engine 2.x ``module/base.py`` (``get_extra_state``: the checkpoint layout kept here).
When to drop: TransformerEngine (or TE-FL) installed: none of this is registered then.
"""

from __future__ import annotations

import atexit
import io
import pickle
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

import fl_patch

from . import fp8_quant as fq
from ._runtime import LOG

__all__ = [
    "HAVE_TE",
    "Autocast",
    "Fp8Padding",
    "Fp8Unpadding",
    "LinearFp8",
    "ProducedCast",
    "Recipe",
    "active_recipe",
    "fp8_layer",
    "fp8_summary",
    "get_fp8_context",
    "get_fp8_recipe",
    "producer",
    "recipe_for",
    "te_checkpoint",
]

HAVE_TE = True  # megatron.core.transformer.moe.experts' guard of its fp8 padding (Fp8Padding below)

RECIPES = ("tensorwise", "delayed", "blockwise")
FORMATS = ("e4m3", "hybrid")
_ALIGN = {"tensorwise": 16, "delayed": 16, "blockwise": fq.BLOCK}  # GEMM sizes the fp8 GEMMs take


def _error(message: str) -> Exception:
    """``TEFeatureError`` (the TE-compatible layers' error), imported when raised: this module also serves
    ``megatron.core.fp8_utils``, which loads before the TE modules can."""
    from fl_patch.impls.te.modules import TEFeatureError

    return TEFeatureError(message)


# --------------------------------------------------------------------------- the recipe
@dataclass(frozen=True)
class Recipe:
    """What a config asks of fp8, once every option is known to be served."""

    format: str  # "e4m3" or "hybrid"
    kind: str  # "tensorwise", "delayed", "blockwise"
    margin: int = 0
    amax_history_len: int = 1
    amax_compute_algo: str = "most_recent"
    wgrad: bool = True  # fp8_wgrad: the weight-gradient GEMM in fp8 (else bf16)

    @property
    def fwd_dtype(self) -> torch.dtype:
        return fq.E4M3

    @property
    def bwd_dtype(self) -> torch.dtype:
        return fq.E5M2 if self.format == "hybrid" else fq.E4M3

    @property
    def align(self) -> int:
        return _ALIGN[self.kind]


def _value(option: Any) -> Any:
    """An enum's value (megatron's ``Fp8Recipe`` is a str enum) or the option itself."""
    return getattr(option, "value", option)


# Options megatron reads for fp8 that this module refuses: (name, value that is fine, why).
_REFUSED: tuple[tuple[str, Any, str], ...] = (
    ("fp8_param", False, "fp8 parameters (--fp8-param-gather) are TE's Float8Tensor; the pack keeps bf16 weights "
     "with megatron's fp32 master copies and casts them once a step"),
    ("fp8_dot_product_attention", False, "core attention runs in bf16 on cuDNN; fp8 attention is TE's"),
    ("fp8_multi_head_attention", False, "core attention runs in bf16 on cuDNN; fp8 attention is TE's"),
    ("fp8_quantizer_factory", None, "custom quantizer factories are TE's CustomRecipe"),
    ("fp8_output_proj", False, "the output projection stays bf16 (it is mxfp8-only in megatron)"),
)  # fmt: skip

_recipes: dict[int, tuple[Any, Recipe]] = {}  # id(config) -> (config, its recipe): read at every layer call
_recipes_lock = threading.Lock()


def recipe_for(config: Any, where: str = "fp8") -> Recipe | None:
    """The :class:`Recipe` ``config`` asks for (None without ``config.fp8``); every fp8 option megatron reads is
    taken or refused here, by name, with one error (``TEFeatureError``)."""
    fmt = getattr(config, "fp8", None)
    if not fmt:
        return None
    cached = _recipes.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    recipe = _validate(config, where)
    with _recipes_lock:
        if len(_recipes) > 256:
            _recipes.clear()
        _recipes[id(config)] = (config, recipe)
    return recipe


def _validate(config: Any, where: str) -> Recipe:
    fmt = _value(config.fp8)
    kind = _value(getattr(config, "fp8_recipe", "delayed"))
    problems = []
    if fmt not in FORMATS:
        problems.append(f"fp8={fmt!r} (formats: 'e4m3', 'hybrid')")
    if kind == "mxfp8":
        problems.append("fp8_recipe='mxfp8' (MXFP8 block scaling needs Blackwell's MXFP8 GEMMs; Hopper has none)")
    elif kind == "custom":
        problems.append("fp8_recipe='custom' (TE's CustomRecipe quantizer factory)")
    elif kind not in RECIPES:
        problems.append(f"fp8_recipe={kind!r} (served: {', '.join(RECIPES)})")
    if kind == "blockwise" and fmt == "hybrid":
        problems.append("fp8='hybrid' with fp8_recipe='blockwise' (block-scaled GEMMs take e4m3 only: use fp8='e4m3')")
    for name, fine, why in _REFUSED:
        value = getattr(config, name, fine)
        if value != fine and value is not None and value is not False:
            problems.append(f"{name}={value!r} ({why})")
    algo = getattr(config, "fp8_amax_compute_algo", "most_recent")
    if algo not in ("most_recent", "max"):
        problems.append(f"fp8_amax_compute_algo={algo!r} (served: 'most_recent', 'max')")
    history = int(getattr(config, "fp8_amax_history_len", 1))
    if history < 1:
        problems.append(f"fp8_amax_history_len={history} (at least 1)")
    if kind == "delayed" and getattr(config, "recompute_granularity", None):
        problems.append(
            f"fp8_recipe='delayed' with recompute_granularity={config.recompute_granularity!r} (a recomputed forward "
            "would advance the amax history again; TE guards this, the pack does not: use fp8_recipe='tensorwise')"
        )
    if getattr(config, "fp4", None):
        problems.append(f"fp4={config.fp4!r} with fp8")
    if problems:
        raise _error(
            f"{where}: fp8={fmt!r} fp8_recipe={kind!r}: the FlagGems pack's fp8 (no Transformer Engine) cannot serve "
            + "; ".join(problems)
            + " (docs/gpu_pack.md, 'fp8 training')"
        )
    return Recipe(
        format=fmt,
        kind=kind,
        margin=int(getattr(config, "fp8_margin", 0)),
        amax_history_len=history,
        amax_compute_algo=algo,
        wgrad=bool(getattr(config, "fp8_wgrad", True)),
    )


# --------------------------------------------------------------------------- autocast (TE's fp8_autocast)
_state = threading.local()


def _stack() -> list[Recipe]:
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    return stack


def active_recipe() -> Recipe | None:
    """The recipe of the innermost :class:`Autocast` this thread is in (None outside fp8 regions)."""
    stack = _stack()
    return stack[-1] if stack else None


class Autocast:
    """``fp8_autocast(enabled=True, fp8_recipe=...)``: the TE-compatible linears inside run their GEMMs in fp8."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe = recipe

    def __enter__(self) -> Autocast:
        _stack().append(self.recipe)
        return self

    def __exit__(self, *exc: object) -> None:
        _stack().pop()


class _BuildCheck:
    """Around a layer's construction under fp8 (``get_fp8_context(..., is_init=True)``): the layer must hold at least
    one fp8-capable linear, else the run would be bf16 while the user believes it fp8 (the local spec's linears
    are megatron's own, which fp8 does not reach, with TE or without)."""

    def __init__(self, config: Any, layer_no: int) -> None:
        self.config, self.layer_no = config, layer_no
        self.built = 0

    def __enter__(self) -> _BuildCheck:
        _builds().append(self)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        _builds().pop()
        if exc_type is None and self.built == 0:
            raise _error(
                f"fp8={_value(self.config.fp8)!r}: layer {self.layer_no + 1} was built with no fp8-capable linear: fp8 "
                "runs in the TE layer spec's linears (get_gpt_layer_with_transformer_engine_spec, "
                "--transformer-impl transformer_engine; served without TE by fl_patch); the local spec's "
                "ColumnParallelLinear/RowParallelLinear stay bf16, so this run would not be fp8"
            )


def _builds() -> list[_BuildCheck]:
    builds = getattr(_state, "builds", None)
    if builds is None:
        builds = _state.builds = []
    return builds


def get_fp8_context(config: Any, layer_no: int = -1, is_init: bool = False) -> AbstractContextManager:
    """``megatron.core.fp8_utils.get_fp8_context`` where TE is absent: :class:`Autocast` for fp8 layers, nothing for
    bf16 runs and for ``first_last_layers_bf16`` layers; at build (``is_init``) every option is checked."""
    if not getattr(config, "fp8", None):
        return nullcontext()
    from megatron.core.fp8_utils import is_first_last_bf16_layer

    recipe = recipe_for(config, "fp8")
    assert recipe is not None
    if is_init:
        # megatron asks for TE's fp8_model_init here only with fp8_param (refused above): the build itself is bf16
        return _BuildCheck(config, layer_no)
    if is_first_last_bf16_layer(config, layer_no):
        return nullcontext()
    return Autocast(recipe)


def get_fp8_recipe(config: Any) -> Recipe | None:
    """``megatron.core.fp8_utils.get_fp8_recipe`` where TE is absent: this module's :class:`Recipe`."""
    return recipe_for(config, "fp8")


# --------------------------------------------------------------------------- activation recompute under fp8
def te_checkpoint(
    forward_func: Callable[..., Any],
    distribute_saved_activations: bool,
    get_rng_state_tracker: Callable[[], Any],
    tp_group: Any,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """``extensions.transformer_engine.te_checkpoint`` without TE: megatron's own activation checkpoint.

    Why: under fp8 megatron recomputes through TE's checkpoint (full recompute in ``recompute.py``, the MLP, the MoE
    layer and its shared experts); without TE that name is None or raises. TE's checkpoint also carries the fp8 region
    into the recomputed forward: here the recipe active when the forward ran is entered again around the recomputed
    call (a region megatron opens inside the checkpointed function is entered by it, as in the forward). The
    recomputed forward then casts exactly as the first one did (``tensorwise``, ``blockwise``: scales from the same
    tensors; the step's fp8 weight copies are reused; ``delayed`` with recompute is refused at build). RNG: megatron's
    ``tensor_parallel.checkpoint`` restores its CUDA RNG tracker's states, the tracker megatron passes here.
    """
    from megatron.core import tensor_parallel

    recipe = active_recipe()

    def run(*inner: Any) -> Any:
        if recipe is None:
            return forward_func(*inner, **kwargs)
        with Autocast(recipe):
            return forward_func(*inner, **kwargs)

    return tensor_parallel.checkpoint(run, distribute_saved_activations, *args)


# --------------------------------------------------------------------------- megatron's TE-version gates of MoE fp8
CONFIG_TE_MIN_VERSION = "megatron.core.transformer.transformer_config.is_te_min_version"
MOE_FP8_GATES = ("1.7.0.dev0", "1.11.0")
"""The TE versions ``TransformerConfig.__post_init__`` requires for MoE fp8 (``num_moe_experts`` with ``fp8``) and
grouped fp8 GEMMs (with ``moe_grouped_gemm``): without TE the config refuses both. tests/impls/test_flaggems_fp8.py re-reads
the installed source: these versions are asked nowhere else there."""


def config_te_min_version(version: str, check_equality: bool = True) -> bool:
    """``transformer_config.is_te_min_version``: True for :data:`MOE_FP8_GATES` (the pack serves MoE fp8, grouped
    experts included), megatron's own answer for every other version asked there."""
    if str(version) in MOE_FP8_GATES:
        return True
    original: Callable[..., bool] = fl_patch.original(CONFIG_TE_MIN_VERSION)
    return original(version, check_equality)


# --------------------------------------------------------------------------- counting (said once, inspectable)
STATS: dict[str, int] = {
    "fp8_gemm_calls": 0,
    "bf16_calls": 0,
    "weight_casts": 0,
    "casts_from_producers": 0,  # casts made (delayed) or begun (their amax) by the kernel that wrote the tensor
    "wgrad_added_by_gemm": 0,  # fp8 weight gradients the GEMM added into main_grad itself (cuBLASLt, beta = 1)
}
_said: set[str] = set()


def _note_bf16(what: str) -> None:
    STATS["bf16_calls"] += 1
    if what not in _said:
        _said.add(what)
        LOG.warning("fl_patch flaggems fp8: %s runs in bf16 (logged once)", what)


_recipes_seen: set[tuple[str, str]] = set()


def _say_at_exit() -> None:
    """What this process ran in fp8, said once at exit where any layer was built for fp8: a run the user believes fp8
    shows that it was (and how many calls were not)."""
    if _recipes_seen and (STATS["fp8_gemm_calls"] or STATS["bf16_calls"]):
        LOG.warning(
            "fl_patch flaggems fp8 (%s): %d linear calls ran their GEMMs in fp8, %d in bf16 (causes logged above), "
            "%d fp8 weight copies made",
            ", ".join(f"{kind} {fmt}" for kind, fmt in sorted(_recipes_seen)),
            STATS["fp8_gemm_calls"],
            STATS["bf16_calls"],
            STATS["weight_casts"],
        )


atexit.register(_say_at_exit)


def fp8_summary() -> dict[str, int]:
    """How many linear calls ran their GEMMs in fp8, how many in bf16 under fp8 (each cause logged once), how many
    fp8 weight copies were made (once a step per weight under megatron's schedules), and how many input or gradient
    casts the kernel that wrote the tensor made or began (the SwiGLU's: ``fp8_swiglu.py``), and how many fp8 weight
    gradients the GEMM added into ``main_grad`` itself (``fp8_quant.scaled_mm_add``)."""
    return dict(STATS)


# --------------------------------------------------------------------------- per-layer state
def _device_of(module: torch.nn.Module) -> torch.device:
    for param in module.parameters(recurse=False):
        return param.device
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


def fp8_layer(config: Any, layer: torch.nn.Module, num_gemms: int = 1) -> LinearFp8 | None:
    """``te_modules.fp8_layer`` on this pack: the layer's :class:`LinearFp8` (None where ``config.fp8`` is unset)."""
    recipe = recipe_for(config, type(layer).__name__)
    if recipe is None:
        return None
    if recipe.kind == "blockwise":
        reason = fq.blockwise_reason(_device_of(layer))
        if reason is not None:
            raise _error(f"{type(layer).__name__}: fp8_recipe='blockwise': {reason}")
    for check in _builds():
        check.built += 1
    _recipes_seen.add((recipe.kind, recipe.format))
    return LinearFp8(recipe, num_gemms)


def _first_microbatch_seen(module: Any) -> bool:
    """TE's ``is_first_microbatch`` protocol: True when the fp8 weight copy may be reused (megatron set the flag for
    this step's first micro-batch, and that call cleared it); the first call of a step clears the flag."""
    first = getattr(module, "is_first_microbatch", None)
    if first:
        module.is_first_microbatch = False
    return first is False


@dataclass
class ProducedCast:
    """The fp8 cast of a tensor made by the kernel that wrote it (``kernels/swiglu_fp8.py``), for one
    :class:`LinearFp8`'s cast of that tensor (:meth:`LinearFp8.produced_cast`, :meth:`LinearFp8.offer`)."""

    role: str  # "input" or "grad"
    dtype: torch.dtype
    slots: torch.Tensor  # fq.scale_slots: [scale_inv, amax, scale]; the producer fills amax (and scale_inv: delayed)
    scale: torch.Tensor | None = None  # delayed: the layer's scale slot the producer cast with
    q: torch.Tensor | None = None  # delayed: the fp8 copy [rows, cols]
    qt: torch.Tensor | None = None  # delayed: its transpose [cols, rows], where the weight gradient is fp8
    source: torch.Tensor | None = None  # the tensor cast (held while offered)
    identity: tuple = ()


def _identity(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, t._version)


def producer(tensor: torch.Tensor) -> LinearFp8 | None:
    """The :class:`LinearFp8` whose fp8 GEMM computed ``tensor`` (its autograd node is that GEMM's), else None: the
    layer whose backward will cast this tensor's gradient."""
    node = tensor.grad_fn
    if node is None or getattr(type(node), "_forward_cls", None) is not _Fp8Linear:
        return None
    layer = getattr(node, "layer", None)
    return layer if isinstance(layer, LinearFp8) else None


class LinearFp8:
    """One TE-compatible linear's fp8: its recipe, delayed-scaling state (TE's layout) and fp8 weight copies.

    Delayed-scaling state, per GEMM ``g`` of ``num_gemms`` (TE's indices): forward scale and amax-history
    columns ``3g`` (input), ``3g + 1`` (weight), ``3g + 2`` (output: unused); backward ``2g`` (output gradient),
    ``2g + 1`` (input gradient: unused). Between steps the state is TE's: row 0 of a history is zero, the scales
    those the next step uses.
    """

    def __init__(self, recipe: Recipe, num_gemms: int = 1) -> None:
        self.recipe = recipe
        self.num_gemms = num_gemms
        self._delayed: dict[str, torch.Tensor] | None = None
        self._weights: dict[int, tuple[tuple[int, int], fq.Operand, fq.Operand]] = {}
        self._offered: dict[str, ProducedCast] = {}  # "input" / "grad": a cast the producing kernel made

    # ----------------------------------------------------------------- when fp8 runs
    def bf16_reason(self, tokens: int, weight_shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> str | None:
        """Why a call of ``tokens`` rows in ``dtype`` through a weight of ``weight_shape`` runs in bf16 (None: fp8)."""
        align = self.recipe.align
        out_features, in_features = weight_shape
        if out_features % align or in_features % align:
            return f"a linear of {in_features} -> {out_features} features (not multiples of {align})"
        if tokens % align:
            return f"a call of {tokens} tokens (not a multiple of {align})"
        if dtype not in (torch.bfloat16, torch.float16, torch.float32):
            return f"input of dtype {dtype}"
        return None

    def takes(self, x: torch.Tensor, weight: torch.Tensor, rows: int | None = None) -> bool:
        """Whether this call runs in fp8: inside an fp8 region, with sizes the fp8 GEMMs take (else bf16, said once)."""
        recipe = active_recipe()
        if recipe is None:
            return False
        if recipe.kind != self.recipe.kind:
            raise _error(
                f"fp8 region's recipe {recipe.kind!r} differs from {self.recipe.kind!r}, the one this layer was built for"
            )
        tokens = rows if rows is not None else x.numel() // max(x.shape[-1], 1)
        reason = self.bf16_reason(tokens, weight.shape, x.dtype)
        if reason is not None:
            _note_bf16(reason)
            return False
        return True

    def takes_grouped(self, x: torch.Tensor, weight: torch.Tensor, splits: list[int]) -> bool:
        """:meth:`takes` for the experts' GEMMs: each expert's rows a multiple of the GEMMs' alignment (megatron pads
        them under fp8: ``Fp8Padding``, or ``moe_router_padding_for_quantization``)."""
        if not self.takes(x, weight, rows=0):
            return False
        align = self.recipe.align
        if any(m % align for m in splits):
            _note_bf16(f"experts' rows {splits[:8]} not multiples of {align}")
            return False
        return True

    # ----------------------------------------------------------------- delayed scaling bookkeeping
    def delayed_state(self, device: torch.device) -> dict[str, torch.Tensor]:
        state = self._delayed
        if state is None or state["scale_fwd"].device != device:
            g, length = self.num_gemms, self.recipe.amax_history_len
            fresh = {
                "scale_fwd": torch.ones(3 * g, dtype=torch.float32),
                "amax_history_fwd": torch.zeros(length, 3 * g, dtype=torch.float32),
                "scale_bwd": torch.ones(2 * g, dtype=torch.float32),
                "amax_history_bwd": torch.zeros(length, 2 * g, dtype=torch.float32),
            }
            source = state if state is not None else fresh
            self._delayed = state = {k: source[k].to(device=device, dtype=torch.float32) for k in fresh}
        return state

    def update_delayed(self, device: torch.device, forward: bool) -> None:
        """TE's ``amax_and_scale_update`` for one direction: scales from the history, then roll it (row 0 zeroed)."""
        state = self.delayed_state(device)
        key = "fwd" if forward else "bwd"
        history, scale = state[f"amax_history_{key}"], state[f"scale_{key}"]
        amax = history.amax(0) if self.recipe.amax_compute_algo == "max" else history[0]
        limit = fq.fp8_max(self.recipe.fwd_dtype if forward else self.recipe.bwd_dtype)
        fresh = torch.full_like(amax, limit) / amax.clamp_min(1e-30) * (2.0**-self.recipe.margin)
        scale.copy_(torch.where((amax > 0) & torch.isfinite(amax), fresh, scale))
        history.copy_(torch.roll(history, -1, 0))
        history[0].zero_()

    # ----------------------------------------------------------------- operands
    # ----------------------------------------------------------------- casts made by the producing kernel
    def produced_cast(self, role: str, rows: int, cols: int, device: torch.device, need_t: bool) -> ProducedCast | None:
        """What the kernel writing a [rows, cols] tensor should make for this layer's next cast of it (``role``
        ``"input"``: the forward's input; ``"grad"``: the output gradient). Current scaling: the amax (the cast still
        runs, without its amax pass); delayed: the fp8 copies at this layer's scale (no cast left). None for block
        scaling and for grouped layers (not served: the cast runs as usual)."""
        r = self.recipe
        if r.kind not in ("tensorwise", "delayed") or self.num_gemms != 1:
            return None
        dtype = r.fwd_dtype if role == "input" else r.bwd_dtype
        made = ProducedCast(role, dtype, fq.scale_slots(device))
        if r.kind == "delayed":
            state = self.delayed_state(device)
            made.scale = state["scale_fwd" if role == "input" else "scale_bwd"][0:1]
            made.q = torch.empty((rows, cols), dtype=dtype, device=device)
            made.qt = torch.empty((cols, rows), dtype=dtype, device=device) if need_t else None
        return made

    def offer(self, made: ProducedCast, source: torch.Tensor) -> None:
        """``made`` is the cast of ``source`` (2-D, as written): this layer's next cast of that very tensor uses it.
        The offer holds ``source``: while it stands, no other tensor can take its memory, so a tensor with its
        address, shape, strides and version (``_identity``) is ``source`` or a view of it, unchanged since."""
        made.source, made.identity = source, _identity(source)
        self._offered[made.role] = made

    def _produced(
        self, role: str, x2: torch.Tensor, gemm: int, need_t: bool
    ) -> tuple[fq.Operand, fq.Operand | None] | None:
        """The operands from a cast offered for ``x2`` (taken once), or None: no offer, or one for another tensor."""
        made = self._offered.pop(role, None)
        if made is None or gemm != 0 or made.identity != _identity(x2):
            return None
        if made.q is None:  # current scaling: the producer's amax, then the cast alone
            q, qt = fq.quantize_tensorwise(x2, made.dtype, self.recipe.margin, transposed=need_t, slots=made.slots)
            assert q is not None
            STATS["casts_from_producers"] += 1
            return q, qt
        if need_t and made.qt is None:
            return None
        state = self.delayed_state(x2.device)
        key = "fwd" if role == "input" else "bwd"
        if made.scale is None or made.scale.data_ptr() != state[f"scale_{key}"].data_ptr():
            return None  # the state was replaced since (a checkpoint loaded in between): cast again
        history = state[f"amax_history_{key}"][0, 0:1]  # what the cast kernel's atomic_max would have set
        history.copy_(torch.maximum(history, made.slots[1:2]))
        scale_inv = made.slots[0:1]
        STATS["casts_from_producers"] += 1
        return fq.Operand(made.q, scale_inv), (
            fq.Operand(made.qt, scale_inv) if need_t and made.qt is not None else None
        )

    def quantize_input(self, x2: torch.Tensor, gemm: int, need_t: bool) -> tuple[fq.Operand, fq.Operand | None]:
        r = self.recipe
        if self._offered:
            produced = self._produced("input", x2, gemm, need_t)
            if produced is not None:
                return produced
        if r.kind == "blockwise":
            return fq.quantize_1x128(x2, r.fwd_dtype, r.margin, transposed=need_t)
        if r.kind == "delayed":
            state = self.delayed_state(x2.device)
            slot = 3 * gemm
            q, qt = fq.quantize_delayed(
                x2, r.fwd_dtype, state["scale_fwd"][slot : slot + 1], state["amax_history_fwd"][0, slot : slot + 1],
                transposed=need_t,
            )  # fmt: skip
        else:
            q, qt = fq.quantize_tensorwise(x2, r.fwd_dtype, r.margin, transposed=need_t)
        assert q is not None
        return q, qt

    def quantize_grad(self, dy2: torch.Tensor, gemm: int, need_t: bool) -> tuple[fq.Operand, fq.Operand | None]:
        r = self.recipe
        if self._offered:
            produced = self._produced("grad", dy2, gemm, need_t)
            if produced is not None:
                return produced
        if r.kind == "blockwise":
            return fq.quantize_1x128(dy2, r.bwd_dtype, r.margin, transposed=need_t)
        if r.kind == "delayed":
            state = self.delayed_state(dy2.device)
            slot = 2 * gemm
            q, qt = fq.quantize_delayed(
                dy2, r.bwd_dtype, state["scale_bwd"][slot : slot + 1], state["amax_history_bwd"][0, slot : slot + 1],
                transposed=need_t,
            )  # fmt: skip
        else:
            q, qt = fq.quantize_tensorwise(dy2, r.bwd_dtype, r.margin, transposed=need_t)
        assert q is not None
        return q, qt

    def weight_operands(self, weight: torch.Tensor, gemm: int, reuse: bool) -> tuple[fq.Operand, fq.Operand]:
        """(w, w transposed) in fp8; kept between micro-batches of a step (``reuse``: not the first micro-batch)."""
        key = (weight.data_ptr(), weight._version)
        cached = self._weights.get(gemm)
        if reuse and cached is not None and cached[0] == key:
            return cached[1], cached[2]
        r = self.recipe
        w = weight.detach()
        STATS["weight_casts"] += 1
        if r.kind == "blockwise":
            wq, wqt = fq.quantize_128x128(w, r.fwd_dtype, r.margin)
        else:
            q, qt = fq.quantize_tensorwise(w, r.fwd_dtype, r.margin, transposed=True)
            assert q is not None and qt is not None
            wq, wqt = q, qt
            if r.kind == "delayed":  # the weight's own amax, recorded in its history slot (checkpoints carry it)
                state = self.delayed_state(w.device)
                slot = 3 * gemm + 1
                state["scale_fwd"][slot : slot + 1].copy_(1.0 / wq.scale_inv)
                history = state["amax_history_fwd"][0, slot : slot + 1]
                history.copy_(torch.maximum(history, fq.fp8_max(r.fwd_dtype) * wq.scale_inv * 2.0**-r.margin))
        self._weights[gemm] = (key, wq, wqt)
        return wq, wqt

    # ----------------------------------------------------------------- the layers' calls
    def linear(self, module: torch.nn.Module, input: torch.Tensor, weight: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """megatron's ``linear_with_grad_accumulation_and_async_allreduce`` (TP all-gather / all-reduce /
        reduce-scatter, gradient accumulation into ``main_grad``) with fp8 GEMMs."""
        reuse = _first_microbatch_seen(module)
        tp_group = kwargs.get("tp_group")
        sequence_parallel = bool(kwargs.get("sequence_parallel", False))
        allreduce_dgrad = bool(kwargs.get("allreduce_dgrad", False))
        if (sequence_parallel or allreduce_dgrad) and tp_group is None:
            from megatron.core.utils import get_tensor_model_parallel_group_if_none

            tp_group = get_tensor_model_parallel_group_if_none(None)
        STATS["fp8_gemm_calls"] += 1
        return _Fp8Linear.apply(
            input, weight, kwargs.get("bias"), self, reuse,
            bool(kwargs.get("gradient_accumulation_fusion", False)), allreduce_dgrad, sequence_parallel, tp_group,
        )  # fmt: skip

    def grouped(
        self, module: torch.nn.Module, x: torch.Tensor, weights: list[torch.Tensor], splits: list[int]
    ) -> torch.Tensor:
        """TE's grouped GEMM of the experts, each expert's rows times its weight, in fp8."""
        reuse = _first_microbatch_seen(module)
        STATS["fp8_gemm_calls"] += 1
        fusion = bool(getattr(getattr(module, "config", None), "gradient_accumulation_fusion", False))
        return _Fp8Grouped.apply(x, self, reuse, fusion, list(splits), *weights)

    # ----------------------------------------------------------------- checkpoints (TE's _extra_state)
    def get_extra_state(self) -> torch.Tensor:
        """TE's layout: an empty uint8 tensor for a stateless recipe; for ``delayed`` a pickled dict (``scale_fwd``,
        ``amax_history_fwd``, ``scale_bwd``, ``amax_history_bwd``, ``extra_fp8_variables``) as a uint8 tensor. No
        ``recipe`` object (TE reads a dict without one as TE 1.x's DelayedScaling checkpoint)."""
        if self.recipe.kind != "delayed" or self._delayed is None:
            return torch.empty(0, dtype=torch.uint8)
        state: dict[str, Any] = {k: v.detach().to("cpu", copy=True) for k, v in self._delayed.items()}
        state["extra_fp8_variables"] = {"num_gemms": self.num_gemms, "fp8_checkpoint": True}
        return torch.frombuffer(bytearray(pickle.dumps(state)), dtype=torch.uint8)

    def set_extra_state(self, state: Any) -> None:
        """Load a TE checkpoint's fp8 state (or this module's): delayed-scaling scales and amax histories."""
        loaded = _load_te_state(state)
        if loaded is None:
            return
        if "scale_fwd" not in loaded:
            return  # a stateless recipe's (or TE's current scaling): nothing to restore
        if self.recipe.kind != "delayed":
            LOG.warning(
                "fl_patch flaggems fp8: a checkpoint's delayed-scaling state ignored: this run's recipe is %r "
                "(no state to restore)",
                self.recipe.kind,
            )
            return
        g = self.num_gemms
        expected = {"scale_fwd": (3 * g,), "scale_bwd": (2 * g,)}
        for key, shape in expected.items():
            if tuple(loaded[key].shape) != shape:
                raise _error(f"fp8 checkpoint state {key} of shape {tuple(loaded[key].shape)}, this layer has {shape}")
        device = self._delayed["scale_fwd"].device if self._delayed is not None else torch.device("cpu")
        length = self.recipe.amax_history_len
        state_out = {}
        for key in ("scale_fwd", "amax_history_fwd", "scale_bwd", "amax_history_bwd"):
            value = loaded[key].detach().to(torch.float32)
            if key.startswith("amax_history") and value.shape[0] != length:  # TE adjusts the length the same way
                value = (
                    value[:length]
                    if value.shape[0] > length
                    else torch.nn.functional.pad(value, (0, 0, 0, length - value.shape[0]))
                )
            state_out[key] = value.to(device)
        self._delayed = state_out


class _TEStub:
    """Stands in for a TE class (a recipe, an enum) in a TE checkpoint's pickled fp8 state, which names TE classes
    that cannot be imported without TE; only the tensors matter here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            self.__dict__.update(state)

    def __call__(self, *args: Any, **kwargs: Any) -> _TEStub:
        return _TEStub(*args, **kwargs)


class _StateUnpickler(pickle.Unpickler):
    """Unpickles TE's fp8 extra state: torch's tensor reconstruction, builtins, TE classes as :class:`_TEStub`."""

    _ALLOWED = ("torch", "collections", "builtins", "copyreg", "_codecs", "numpy", "enum", "dataclasses")

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".", maxsplit=1)[0] == "transformer_engine":
            return _TEStub
        if module.split(".", maxsplit=1)[0] in self._ALLOWED or module == "megatron.core.safe_globals":
            # (megatron-core routes torch's storage unpickling through its safe_globals)
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"fp8 extra state names {module}.{name}: not a TE checkpoint's state")


def _load_te_state(state: Any) -> dict[str, Any] | None:
    if state is None:
        return None
    if isinstance(state, torch.Tensor):
        if state.numel() == 0:
            return None
        loaded = _StateUnpickler(io.BytesIO(state.detach().cpu().numpy().tobytes())).load()
    elif isinstance(state, io.BytesIO):  # TE 1.x wrote torch.save into a BytesIO
        state.seek(0)
        if not state.getbuffer().nbytes:
            return None
        loaded = torch.load(state, map_location="cpu", weights_only=False)
    else:
        raise _error(f"fp8 extra state of type {type(state).__name__}: not a Transformer Engine checkpoint's")
    return loaded if isinstance(loaded, dict) else None


# --------------------------------------------------------------------------- the GEMMs
def _gather(x: torch.Tensor, group: Any) -> torch.Tensor:
    from megatron.core.parallel_state import get_global_memory_buffer

    shape = list(x.shape)
    shape[0] *= group.size()
    out = get_global_memory_buffer().get_tensor(shape, x.dtype, "mpu")
    torch.distributed.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


def _add_wgrad(dyqt: fq.Operand, x: fq.Operand, main_grad: torch.Tensor) -> None:
    """The fp8 weight gradient added into megatron's fp32 ``main_grad``: by the GEMM itself where cuBLASLt's
    accumulating call serves (``fp8_quant.scaled_mm_add``), counted."""
    if fq.scaled_mm_add(dyqt, x, main_grad):
        STATS["wgrad_added_by_gemm"] += 1


def _dummy_wgrad(weight: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """megatron's convention once the weight gradient went into ``main_grad``: a placeholder grad (or None)."""
    if not hasattr(weight, "grad_added_to_main_grad"):
        return None
    maker: Callable = torch.zeros if getattr(weight, "zero_out_wgrad", False) else torch.empty
    shape = weight.main_grad.shape  # type: ignore[attr-defined]  # megatron DDP's fp32 gradient buffer
    grad = maker(shape, dtype=dtype, device=weight.device, requires_grad=False)
    weight.grad_added_to_main_grad = True  # megatron's parameter mark
    return grad


class _Fp8Linear(torch.autograd.Function):
    """y = x @ w.T (+ b) with fp8 forward, dgrad and wgrad GEMMs; megatron's TP communication around them."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layer: LinearFp8,
        reuse: bool,
        accumulate: bool,
        allreduce_dgrad: bool,
        sequence_parallel: bool,
        tp_group: Any,
    ) -> torch.Tensor:
        recipe = layer.recipe
        total = _gather(x, tp_group) if sequence_parallel else x
        x2 = total.reshape(-1, total.shape[-1])
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        wgrad = ctx.needs_input_grad[1]  # (grad mode is off inside forward: ask autograd)
        fp8_wgrad = wgrad and recipe.wgrad
        xq, xqt = layer.quantize_input(x2, 0, need_t=fp8_wgrad)
        wq, wqt = layer.weight_operands(weight, 0, reuse)
        if recipe.kind == "delayed":
            layer.update_delayed(x2.device, forward=True)
        out = fq.scaled_mm(xq, wq.t(), x.dtype, fast_accum=True, bias=bias)  # TE: fprop without split accumulation
        ctx.layer, ctx.accumulate = layer, accumulate
        ctx.allreduce_dgrad, ctx.sequence_parallel, ctx.tp_group = allreduce_dgrad, sequence_parallel, tp_group
        ctx.use_bias, ctx.dtype, ctx.x_shape = bias is not None, x.dtype, x.shape
        ctx.wqt, ctx.xqt = wqt, xqt
        ctx.main_grad = weight.main_grad if accumulate and hasattr(weight, "main_grad") else None
        # the bf16 input only for a bf16 weight gradient (fp8_wgrad=False)
        ctx.save_for_backward(weight, x2 if wgrad and not fp8_wgrad else None)
        return out.view(*total.shape[:-1], out.shape[-1])

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        weight, x2_bf16 = ctx.saved_tensors
        layer: LinearFp8 = ctx.layer
        recipe = layer.recipe
        dy2 = dy.reshape(-1, dy.shape[-1])
        if not dy2.is_contiguous():
            dy2 = dy2.contiguous()
        wgrad = weight.requires_grad
        fp8_wgrad = wgrad and recipe.wgrad
        dyq, dyqt = layer.quantize_grad(dy2, 0, need_t=fp8_wgrad)
        if recipe.kind == "delayed":
            layer.update_delayed(dy2.device, forward=False)
        dx = fq.scaled_mm(dyq, ctx.wqt.t(), ctx.dtype)
        dx = dx.view(*ctx.x_shape[:-1], dx.shape[-1]) if not ctx.sequence_parallel else dx
        if ctx.sequence_parallel:
            total_shape = list(ctx.x_shape)
            total_shape[0] *= ctx.tp_group.size()
            dx_total = dx.view(total_shape)
            local = torch.empty(list(ctx.x_shape), dtype=dx.dtype, device=dx.device)
            torch.distributed.reduce_scatter_tensor(local, dx_total, group=ctx.tp_group)
            dx = local
        elif ctx.allreduce_dgrad:
            torch.distributed.all_reduce(dx, group=ctx.tp_group)
        grad_weight = None
        if wgrad:
            main_grad = ctx.main_grad
            if main_grad is not None:
                if fp8_wgrad:
                    assert dyqt is not None
                    _add_wgrad(dyqt, ctx.xqt.t(), main_grad)
                else:
                    main_grad.add_(dy2.t().matmul(x2_bf16))
                grad_weight = _dummy_wgrad(weight, ctx.dtype)
            elif fp8_wgrad:
                assert dyqt is not None
                grad_weight = fq.scaled_mm(dyqt, ctx.xqt.t(), weight.dtype)
            else:
                grad_weight = dy2.t().matmul(x2_bf16).to(weight.dtype)
        grad_bias = dy2.sum(0) if ctx.use_bias else None
        ctx.wqt = ctx.xqt = ctx.main_grad = None
        return dx, grad_weight, grad_bias, None, None, None, None, None, None


class _Fp8Grouped(torch.autograd.Function):
    """The experts' GEMMs (rows of ``x`` split by ``splits``, each times its weight transposed) in fp8."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, layer: LinearFp8, reuse: bool, accumulate: bool, splits: list[int], *weights: Any
    ) -> torch.Tensor:
        recipe = layer.recipe
        n_out = weights[0].shape[0]
        out = torch.empty((x.shape[0], n_out), dtype=x.dtype, device=x.device)
        parts = torch.split(x, splits)
        need_t = any(ctx.needs_input_grad[5:]) and recipe.wgrad
        saved: list[tuple[fq.Operand | None, fq.Operand]] = []
        start = 0
        for g, (part, w, rows) in enumerate(zip(parts, weights, splits, strict=True)):
            wq, wqt = layer.weight_operands(w, g, reuse)
            if rows:
                xq, xqt = layer.quantize_input(part, g, need_t=need_t)
                out[start : start + rows] = fq.scaled_mm(xq, wq.t(), x.dtype, fast_accum=True)
            else:
                xqt = None
            saved.append((xqt, wqt))
            start += rows
        if recipe.kind == "delayed":
            layer.update_delayed(x.device, forward=True)
        ctx.layer, ctx.splits, ctx.saved, ctx.dtype, ctx.accumulate = layer, splits, saved, x.dtype, accumulate
        ctx.save_for_backward(*weights, x if not recipe.wgrad else None)
        return out

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Any, ...]:
        *weights, x_bf16 = ctx.saved_tensors
        layer: LinearFp8 = ctx.layer
        recipe = layer.recipe
        dy = dy.contiguous()
        dx = torch.empty((dy.shape[0], weights[0].shape[1]), dtype=ctx.dtype, device=dy.device)
        grads: list[torch.Tensor | None] = []
        start = 0
        x_parts = torch.split(x_bf16, ctx.splits) if x_bf16 is not None else None
        for g, (rows, w, (xqt, wqt)) in enumerate(zip(ctx.splits, weights, ctx.saved, strict=True)):
            part = dy[start : start + rows]
            fp8_wgrad = w.requires_grad and recipe.wgrad and rows > 0
            main_grad = w.main_grad if ctx.accumulate and hasattr(w, "main_grad") else None
            dw: torch.Tensor | None = None
            added = False  # the fp8 GEMM put this expert's gradient into main_grad itself
            if rows:
                dyq, dyqt = layer.quantize_grad(part, g, need_t=fp8_wgrad)
                dx[start : start + rows] = fq.scaled_mm(dyq, wqt.t(), ctx.dtype)
                if fp8_wgrad:
                    assert xqt is not None and dyqt is not None
                    if main_grad is not None:
                        _add_wgrad(dyqt, xqt.t(), main_grad)
                        added = True
                    else:
                        dw = fq.scaled_mm(dyqt, xqt.t(), w.dtype)
                elif w.requires_grad and x_parts is not None:
                    dw = part.t().matmul(x_parts[g])
            if added:
                grads.append(_dummy_wgrad(w, ctx.dtype))
            elif w.requires_grad:
                if dw is None:
                    dw = torch.zeros_like(w, dtype=torch.float32 if main_grad is not None else w.dtype)
                if main_grad is not None:
                    main_grad.add_(dw)
                    grads.append(_dummy_wgrad(w, ctx.dtype))
                else:
                    grads.append(dw.to(w.dtype))
            else:
                grads.append(None)
            start += rows
        if recipe.kind == "delayed":
            layer.update_delayed(dy.device, forward=False)
        ctx.saved = None
        return (dx, None, None, None, None, *grads)


# --------------------------------------------------------------------------- MoE padding (TE's Fp8Padding)
class Fp8Padding(torch.nn.Module):
    """TE's ``Fp8Padding``: each expert's rows padded with zeros to a multiple of ``align_size`` (16), the size the
    fp8 GEMMs take. ``forward(x, splits) -> (padded x, padded splits)``."""

    def __init__(self, num_gemms: int, align_size: int | None = None) -> None:
        super().__init__()
        self.num_gemms = num_gemms
        self.align_size = align_size or 16

    def forward(self, inp: torch.Tensor, m_splits: list[int]) -> tuple[torch.Tensor, list[int]]:
        splits = [int(m) for m in m_splits]
        padded = [-(-m // self.align_size) * self.align_size for m in splits]
        if padded == splits:
            return inp, splits
        parts = torch.split(inp, splits)
        pieces = []
        for part, m, p in zip(parts, splits, padded, strict=True):
            pieces.append(part)
            if p > m:
                pieces.append(inp.new_zeros((p - m, *inp.shape[1:])))
        return torch.cat(pieces), padded


class Fp8Unpadding(torch.nn.Module):
    """TE's ``Fp8Unpadding``: the rows :class:`Fp8Padding` added, removed. ``forward(x, splits) -> x``."""

    def __init__(self, num_gemms: int, align_size: int | None = None) -> None:
        super().__init__()
        self.num_gemms = num_gemms
        self.align_size = align_size or 16

    def forward(self, inp: torch.Tensor, m_splits: list[int]) -> torch.Tensor:
        splits = [int(m) for m in m_splits]
        padded = [-(-m // self.align_size) * self.align_size for m in splits]
        if padded == splits:
            return inp
        parts = torch.split(inp, padded)
        return torch.cat([part[:m] for part, m in zip(parts, splits, strict=True)])
