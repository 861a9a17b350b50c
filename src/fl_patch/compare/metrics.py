"""How far the impl's result is from upstream's, and whether that is a difference: errors and verdicts.

Each compared leaf (an output tensor, a gradient, a tensor the call changed in place, a Python
number) gets the errors msprobe reports per API (cosine similarity, max absolute error, max
relative error) and a verdict against thresholds that depend on its dtype.

The thresholds start from msprobe's published pre-check criteria (mindstudio-probe 1.0.3,
``msprobe pytorch doc api_accuracy_checker.md``, "API预检指标"): cosine > 0.99; then for float16
and bfloat16 the share of elements whose relative error exceeds 1% must stay below 1% (its
"dual hundredths", a failure is an error) and above 0.1% at most (its "dual thousandths", a
failure is a warning); for float32 and float64 the same with 0.1% ("dual thousandths": error)
and 0.01% ("dual ten-thousandths": warning). Two changes, both because fl_patch compares an impl
with upstream at the *same* precision, not a device against a float64 CPU reference:

- msprobe passes any tensor whose max absolute error is below 0.001. Activations and gradients of
  a small model are mostly far below 0.001 (a 0.02-std initialisation), so that rule passes a RoPE
  with its sign flipped; it is dropped. Instead the relative error of an element is taken against
  ``max(|expected|, floor)``, with the floor at 0.1% of the tensor's largest magnitude (and never
  below msprobe's small-value threshold: 1e-6 for float32, 1e-3 for 16-bit types): cancellation
  noise in elements a thousand times smaller than the tensor's scale does not count, a wrong
  result does.
- Non-finite values must sit in the same places with the same values (msprobe's inf/nan error rate
  as a hard rule), and dtypes, shapes and structure must agree: a kernel that returns float32
  where upstream returns bfloat16 changes what runs after it.

Booleans and integers are compared exactly (msprobe's binary-consistency rule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["REPLAY_MAX_RATIO", "REPLAY_RMSE_RATIO", "Rule", "TensorDiff", "diff_leaf", "rounding_ratios", "rule_for"]


@dataclass(frozen=True)
class Rule:
    """The thresholds for one dtype."""

    rtol: float  # an element is "off" when its relative error exceeds this
    error_share: float  # more than this share of elements off: the leaf differs
    warn_rtol: float  # the stricter pair, failing which is msprobe's "warning" (still a match here)
    warn_share: float
    small: float  # msprobe's small-value threshold: the least floor of the relative error
    cosine: float = 0.99


_SIXTEEN_BIT = Rule(rtol=1e-2, error_share=1e-2, warn_rtol=1e-3, warn_share=1e-3, small=1e-3)
_THIRTY_TWO_BIT = Rule(rtol=1e-3, error_share=1e-3, warn_rtol=1e-4, warn_share=1e-4, small=1e-6)
_RULES = {torch.float16: _SIXTEEN_BIT, torch.bfloat16: _SIXTEEN_BIT, torch.float32: _THIRTY_TWO_BIT}
_RULES[torch.float64] = _THIRTY_TWO_BIT  # as msprobe: float64 is held to float32's pair
# The tensor-scale part of the floor: errors are relative to at least 0.1% of the largest magnitude.
SCALE_FLOOR = 1e-3


def rule_for(dtype: torch.dtype) -> Rule:
    """The thresholds for a floating dtype; types msprobe has none for (float8, ...) get the 16-bit pair."""
    return _RULES.get(dtype, _SIXTEEN_BIT)


@dataclass
class TensorDiff:
    """One compared leaf of one call: what it is, its errors, its verdict."""

    name: str  # "output", "output[1]", "grad of input 0", "grad of param linear_fc1.weight", "arg 0 after the call"
    dtype: str
    shape: tuple[int, ...]
    max_abs: float = 0.0
    max_rel: float = 0.0
    cosine: float | None = 1.0
    off_share: float = 0.0  # share of elements whose relative error exceeds the dtype's rtol
    differs: bool = False
    warning: bool = False  # msprobe's warning: within the error pair, outside the stricter one
    cause: str = ""  # why it differs, in words

    def describe(self) -> str:
        if self.cause:
            return f"{self.name}: {self.cause}"
        cosine = "-" if self.cosine is None else f"{self.cosine:.6f}"
        return (
            f"{self.name} ({self.dtype}{list(self.shape)}): max abs err {self.max_abs:.3g}, "
            f"max rel err {self.max_rel:.3g}, cosine {cosine}, {self.off_share:.2%} of elements off"
        )


def _structural(name: str, impl: object, upstream: object) -> TensorDiff | None:
    """A difference of kind, dtype or shape (no numbers to compare), or None when the leaves line up."""
    if isinstance(impl, torch.Tensor) and isinstance(upstream, torch.Tensor):
        if impl.shape != upstream.shape:
            return _differs(name, impl, f"shape {list(impl.shape)} where upstream gives {list(upstream.shape)}")
        if impl.dtype != upstream.dtype:
            return _differs(name, impl, f"dtype {_dtype(impl.dtype)} where upstream gives {_dtype(upstream.dtype)}")
        return None
    if isinstance(impl, torch.Tensor) or isinstance(upstream, torch.Tensor):
        return _differs(name, impl, f"{_what(impl)} where upstream gives {_what(upstream)}")
    return None


def _what(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor {_dtype(value.dtype)}{list(value.shape)}"
    return "None" if value is None else f"a {type(value).__name__}"


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _differs(name: str, value: object, cause: str) -> TensorDiff:
    if isinstance(value, torch.Tensor):
        return TensorDiff(name, _dtype(value.dtype), tuple(value.shape), differs=True, cause=cause, cosine=None)
    return TensorDiff(name, type(value).__name__, (), differs=True, cause=cause, cosine=None)


def diff_leaf(name: str, impl: object, upstream: object) -> TensorDiff | None:
    """The comparison of one leaf; None for leaves that carry no number (strings, objects) and agree in kind."""
    structural = _structural(name, impl, upstream)
    if structural is not None:
        return structural
    if isinstance(impl, torch.Tensor) and isinstance(upstream, torch.Tensor):
        return _diff_tensors(name, impl, upstream)
    if isinstance(impl, bool | int | float) and isinstance(upstream, bool | int | float):
        exact = not isinstance(impl, float) and not isinstance(upstream, float)
        dtype = torch.int64 if exact else torch.float64
        diff = _diff_tensors(name, torch.tensor(impl, dtype=dtype), torch.tensor(upstream, dtype=dtype))
        diff.dtype = type(impl).__name__
        return diff
    if (impl is None) != (upstream is None):
        return _differs(name, impl, f"{_what(impl)} where upstream gives {_what(upstream)}")
    return None


def _diff_tensors(name: str, impl: torch.Tensor, upstream: torch.Tensor) -> TensorDiff:
    diff = TensorDiff(name, _dtype(impl.dtype), tuple(impl.shape))
    if impl.numel() == 0:
        return diff
    a = impl.detach()
    b = upstream.detach().to(a.device)
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if not (a.is_floating_point() or b.is_floating_point()):
        return _diff_exact(diff, a, b)
    a, b = a.to(torch.float64), b.to(torch.float64)
    finite_a, finite_b = torch.isfinite(a), torch.isfinite(b)
    same_nonfinite = torch.equal(finite_a, finite_b) and torch.equal(
        torch.where(finite_a, 0.0, torch.nan_to_num(a, nan=1.0)),
        torch.where(finite_b, 0.0, torch.nan_to_num(b, nan=1.0)),
    )
    if not same_nonfinite:
        count = int((finite_a != finite_b).sum())
        diff.differs, diff.cosine = True, None
        diff.cause = f"inf/nan in other places than upstream's ({count} of {a.numel()} elements)"
        return diff
    a, b = a[finite_a], b[finite_b]
    if a.numel() == 0:
        return diff
    rule = rule_for(impl.dtype)
    error = (a - b).abs()
    floor = max(rule.small, SCALE_FLOOR * float(b.abs().max()))
    relative = error / torch.clamp(b.abs(), min=floor)
    diff.max_abs = float(error.max())
    diff.max_rel = float(relative.max())
    diff.off_share = float((relative > rule.rtol).double().mean())
    diff.cosine = _cosine(a, b)
    warn_share = float((relative > rule.warn_rtol).double().mean())
    if diff.cosine is not None and diff.cosine <= rule.cosine:
        diff.differs = True
    elif diff.off_share > rule.error_share:
        diff.differs = True
    diff.warning = not diff.differs and warn_share > rule.warn_share
    return diff


def _diff_exact(diff: TensorDiff, a: torch.Tensor, b: torch.Tensor) -> TensorDiff:
    """Booleans and integers: any element that is not equal is a difference."""
    unequal = a != b
    diff.off_share = float(unequal.double().mean())
    if bool(unequal.any()):
        error = (a.to(torch.float64) - b.to(torch.float64)).abs()
        diff.max_abs = float(error.max())
        diff.max_rel = float((error / torch.clamp(b.to(torch.float64).abs(), min=1.0)).max())
        diff.differs = True
        diff.cause = f"{int(unequal.sum())} of {a.numel()} elements not equal to upstream's"
    diff.cosine = _cosine(a.to(torch.float64).flatten(), b.to(torch.float64).flatten())
    return diff


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """Cosine similarity; 1.0 when both are all zeros, 0.0 when only one is (msprobe reports nan there)."""
    norm_a, norm_b = float(a.norm()), float(b.norm())
    if norm_a == 0.0 and norm_b == 0.0:
        return 1.0
    if norm_a == 0.0 or norm_b == 0.0:
        return 0.0
    cosine = float((a.flatten() @ b.flatten()) / (norm_a * norm_b))
    return None if math.isnan(cosine) else max(-1.0, min(1.0, cosine))


# The float32 replay of a 16-bit call that differs (``call.py``): the impl's error against upstream run in float32
# may be at most these multiples of upstream's own error against it. Chosen here, in the spirit of msprobe's
# benchmark comparison (a device's error against a high-precision golden, judged relative to a reference device's
# error against the same golden), not msprobe's numbers: two correct bf16 computations of one function differ by
# their roundings, and each is about as far from the float32 result as the other; a different computation is
# not (a dropped scale, a flipped sign, a wrong mask put its error at the size of the values themselves).
REPLAY_RMSE_RATIO = 2.0
REPLAY_MAX_RATIO = 4.0


def rounding_ratios(impl: torch.Tensor, upstream: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """(RMSE ratio, max-abs ratio) of the impl's error against ``reference`` over upstream's error against it.

    The denominators have a floor of one bf16 rounding step (2**-8) of the tensor's RMS, so a leaf upstream computes
    exactly in float32 terms cannot make any error look infinitely worse."""
    ref = reference.detach().to(torch.float64)
    a = impl.detach().to(ref.device, torch.float64) - ref
    b = upstream.detach().to(ref.device, torch.float64) - ref
    finite = torch.isfinite(ref) & torch.isfinite(a) & torch.isfinite(b)
    if not bool(finite.any()):
        return math.inf, math.inf
    a, b, ref = a[finite], b[finite], ref[finite]
    floor = 2.0**-8 * float(ref.pow(2).mean().sqrt()) / 16 + 1e-30
    rmse = float(a.pow(2).mean().sqrt()) / max(float(b.pow(2).mean().sqrt()), floor)
    worst = float(a.abs().max()) / max(float(b.abs().max()), floor)
    return rmse, worst
