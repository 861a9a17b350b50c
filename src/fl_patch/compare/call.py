"""One compared call: the impl's result goes to the program; upstream's original runs beside it, on copies.

The order, for one of the first N calls of a target (``Comparison``):

1. ``prepare``: copy the inputs (``capture.Inputs``), before the impl can change them in place; clone the
   buffers of a module receiver; save the RNG state.
2. The impl runs on the real inputs (the caller does this): its result is what the program gets, its
   exceptions are the program's.
3. ``finish``: snapshot the program state the call can reach (``capture.ProgramState``); with the RNG
   put back to step 1's, run the original on the copies under the guard (``guard.Guard``: no
   collective, no write into the program's tensors); compare every output, every tensor either side
   changed in place, an optimizer's state, a module's buffers. Where the impl's outputs carry
   autograd, one random cotangent (from a generator of its own, never the program's) is pulled back
   through the original's graph and, from the same RNG state and fresh copies, through a second run
   of the impl: the gradients of every input and of the receiver module's parameters are compared.
   Then the program state is put back, and the RNG state is the one the impl left.
4. Where a 16-bit leaf differs by the dtype's thresholds, the original runs once more on float32 copies of the
   inputs (a module receiver's 16-bit parameters as float32 leaves, for the call): when each such leaf of the impl
   is no further from that float32 result than upstream's own bf16 result is (``metrics.rounding_ratios``), the
   two differ by rounding, not by what they compute, and the leaf is a match with a note saying so.

Inside the original's run, other patched targets run their impls (nested wrappers are quiet while a
compare runs on the thread): each target is compared against its own upstream, never its callers'.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from fl_patch.compare.capture import Inputs, ProgramState, RngState, generators_in, tensors_in
from fl_patch.compare.guard import Aborted, Communicates, Guard
from fl_patch.compare.metrics import REPLAY_MAX_RATIO, REPLAY_RMSE_RATIO, TensorDiff, diff_leaf, rounding_ratios
from fl_patch.compare.results import TargetResult
from fl_patch.core.errors import is_stop_request

__all__ = ["ACTIVE", "UNINITIALISED", "Comparison", "Prepared", "Sides", "run"]


class _Active(threading.local):
    on = False  # a compare runs on this thread: every wrapper just calls its impl


ACTIVE = _Active()


@dataclass
class Sides:
    """What runs on each side of one call, and whose parameters are leaves of the gradients."""

    impl: Callable[..., Any]
    original: Callable[..., Any]
    impl_module: torch.nn.Module | None = None
    original_module: torch.nn.Module | None = None


@dataclass
class Prepared:
    """A call's state captured before the impl ran."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    inputs: Inputs
    copies: tuple[tuple[Any, ...], dict[str, Any]]
    rng: RngState
    buffers: dict[tuple[str, str], torch.Tensor] = field(default_factory=dict)  # a module receiver's, cloned
    real_buffers: dict[tuple[str, str], torch.Tensor] = field(default_factory=dict)  # the program's own
    versions: dict[tuple[str, str], int] = field(default_factory=dict)


class Comparison:
    """The compare of one target (one method of a class target): its budget and how one call is compared."""

    def __init__(self, result: TargetResult, calls: int, label: str = "") -> None:
        self.result = result
        self.left = calls  # read without the lock by the wrappers: once it is 0, they just call the impl
        self.label = f"{label}: " if label else ""
        self._lock = threading.Lock()
        self._seed = zlib.crc32(f"{result.target}{label}".encode())

    def take(self) -> int | None:
        """One call of the budget (its number, from 1), or None when it is spent or the target stopped."""
        if plain_now():
            return None
        with self._lock:
            if self.left <= 0 or self.result.stopped:
                self.left = 0
                return None
            self.left -= 1
            self.result.seen += 1
            return self.result.seen

    def prepare(self, sides: Sides, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Prepared | None:
        ACTIVE.on = True
        try:
            inputs = Inputs()
            copies = _copy(inputs, args, kwargs)
            prepared = Prepared(args, kwargs, inputs, copies, RngState(generators_in(args, kwargs)))
            if sides.impl_module is not None:
                for path, module in sides.impl_module.named_modules():
                    for name, buffer in module._buffers.items():
                        if buffer is not None:
                            prepared.buffers[(path, name)] = buffer.detach().clone()
                            prepared.real_buffers[(path, name)] = buffer
                            prepared.versions[(path, name)] = buffer._version
            return prepared
        except Exception as exc:  # noqa: BLE001  (never the program's problem: the call just is not compared)
            self.result.note(f"{self.label}its inputs could not be copied ({type(exc).__name__}: {exc})")
            return None
        finally:
            ACTIVE.on = False

    def finish(self, call: int, sides: Sides, prepared: Prepared, output: Any) -> None:
        """Compare one call whose impl returned ``output``; raises only a stop request or a strict problem."""
        after = RngState(tuple(g for g, _ in prepared.rng.generators))
        ACTIVE.on = True
        try:
            diffs = self._compare(call, sides, prepared, output)
        finally:
            ACTIVE.on = False
            after.restore()
        if diffs is None:
            return
        if not diffs:
            self.result.note(
                f"{self.label}nothing to compare: it returns no tensor and changes none of its inputs "
                "(its effect is elsewhere: global state, I/O)"
            )
            return
        first = self.result.add_call(call, [_labelled(self.label, d) for d in diffs])
        if first is not None:
            _report_difference(self.result, first, call)

    def _compare(self, call: int, sides: Sides, prepared: Prepared, output: Any) -> list[TensorDiff] | None:
        if not prepared.inputs.pairs and sides.impl_module is None and not any(True for _ in tensors_in(output)):
            self.result.note(f"{self.label}no tensor in or out of its calls (not a numerical function)")
            return None
        state = ProgramState(
            [("arg", prepared.args), ("kwarg", prepared.kwargs), ("output", output), ("module", sides.impl_module)],
            packages=_packages(self.result.target),
        )
        if state.truncated:
            self.result.note(f"{self.label}more state than the guard walks (some writes may go unseen)")
        spare = _copy_again(prepared.copies)  # pristine inputs for the impl's second run, taken before the original's
        replay = _copy_again(prepared.copies) if _sixteen_bit(prepared.copies, sides.original_module) else None
        try:
            prepared.rng.restore()
            with Guard(state.storages), _eager():
                swapped = _swap_buffers(sides.original_module, prepared)
                upstream = sides.original(*prepared.copies[0], **prepared.copies[1])
                diffs = _outputs(output, upstream) + _changed(prepared, swapped, None)
                if self.result.target in UNINITIALISED:
                    diffs = self._layout_only(diffs)
                again: tuple[Any, dict[tuple[str, str], torch.Tensor]] | None = None
                pulled = Pulled({}, _leaves_of(output), _leaves_of(upstream))
                if torch.is_grad_enabled() and any(t.requires_grad for _, t in tensors_in(output)):
                    grads, again = self._gradients(call, sides, prepared, spare, output, upstream, state, pulled)
                    diffs += grads
                if replay is not None and any(_replayable(d) for d in diffs):
                    self._against_float32(sides, prepared, replay, state, pulled, diffs)
                if any(d.differs for d in diffs) and self._unsteady(sides, prepared, spare, output, again, state):
                    return None
        except Aborted as exc:
            self.result.stopped = True  # structural: never run this original again
            what = "communicates" if isinstance(exc, Communicates) else "writes state the program holds"
            self.result.note(f"{self.label}not run: it {what} ({exc})")
            return None
        except BaseException as exc:
            if is_stop_request(exc):
                raise
            self.result.note(f"{self.label}the original raises here: {_short(exc)}")
            return None
        finally:
            _restore_buffers(sides.impl_module, prepared)
            self._put_back(state)
            written = state.written()
            if written:
                self.result.stopped = True
                self.result.note(
                    f"{self.label}a tensor the program holds changed while it ran: {', '.join(written[:3])}"
                )
        return diffs

    def _layout_only(self, diffs: list[TensorDiff]) -> list[TensorDiff]:
        """A factory of uninitialised memory: its values are whatever the allocator hands out, on either side, so only
        what it is (kind, shape, dtype: the causes ``diff_leaf`` names) is compared. Two runs of the impl often return
        the same recycled block, so the check for an unsteady impl cannot be relied on to catch it."""
        self.result.note(
            f"{self.label}returns uninitialised memory: its values are not compared, its shape and dtype are"
        )
        for diff in diffs:
            if diff.differs and (not diff.cause or diff.cause.startswith("inf/nan")):  # values, not layout
                diff.differs, diff.max_abs, diff.max_rel, diff.cosine, diff.off_share = False, 0.0, 0.0, 1.0, 0.0
                diff.cause = ""
        return diffs

    def _put_back(self, state: ProgramState) -> None:
        changed = state.put_back()
        if changed:
            self.result.note(f"{self.label}the original changed {', '.join(changed[:2])}: put back")

    def _against_float32(
        self,
        sides: Sides,
        prepared: Prepared,
        replay: Spare,
        state: ProgramState,
        pulled: Pulled,
        diffs: list[TensorDiff],
    ) -> None:
        """Step 4: upstream once more in float32; each differing 16-bit leaf whose impl value is no further from it than
        upstream's own value is, is a rounding difference: a match, said in a note. Anything else stays a difference."""
        try:
            self._put_back(state)
            prepared.rng.restore()
            args, kwargs = _upcast(replay.copies[0], leaves=True), _upcast(replay.copies[1], leaves=True)
            params = _float32_parameters(sides.original_module)
            with _reparametrized(sides.original_module, params), _Float32Mode():
                reference = sides.original(*args, **kwargs)
                values = _leaves_of(reference)
                if pulled.cotangents:
                    leaves = _leaves((args, kwargs), sides.original_module)
                    leaves.update((f"param {name}", p) for name, p in params.items() if p.requires_grad)
                    grads = _pull_back(reference, pulled.cotangents, leaves)
                    values.update((f"grad of {name}", g) for name, g in grads.items())
        except Aborted:
            raise
        except BaseException as exc:
            if is_stop_request(exc):
                raise
            self.result.note(
                f"{self.label}the float32 replay of upstream raised {_short(exc)}: 16-bit leaves judged as is"
            )
            return
        worst: tuple[float, float, str] | None = None
        for diff in diffs:
            if not _replayable(diff):
                continue
            name = diff.name
            ours, theirs, ref = pulled.ours.get(name), pulled.theirs.get(name), values.get(name)
            if (
                not (
                    isinstance(ours, torch.Tensor)
                    and isinstance(theirs, torch.Tensor)
                    and isinstance(ref, torch.Tensor)
                )
                or tuple(ref.shape) != diff.shape
            ):
                continue
            rmse, largest = rounding_ratios(ours, theirs, ref)
            if rmse <= REPLAY_RMSE_RATIO and largest <= REPLAY_MAX_RATIO:
                diff.differs, diff.warning = False, True
                if worst is None or rmse > worst[0]:
                    worst = (rmse, largest, name)
            else:
                diff.cause = (
                    f"{diff.describe().partition(': ')[2]}; against upstream run in float32 its error is {rmse:.3g}x "
                    f"upstream's own (RMSE; max {largest:.3g}x): not a rounding difference"
                )
        said = f"{self.label}16-bit results differ"
        if worst is not None and not any(r.startswith(said) for r in self.result.reasons):  # once a target
            self.result.note(
                f"{self.label}16-bit results differ from upstream's beyond the dtype's thresholds, but no further from "
                f"upstream run in float32 than upstream's own (worst: {worst[2]}, error {worst[0]:.2f}x upstream's "
                f"RMSE, {worst[1]:.2f}x its max; allowed {REPLAY_RMSE_RATIO:g}x, {REPLAY_MAX_RATIO:g}x): rounding"
            )

    def _run_impl_again(
        self, sides: Sides, prepared: Prepared, spare: Spare, state: ProgramState
    ) -> tuple[Any, dict[tuple[str, str], torch.Tensor]]:
        """The impl once more, on the spare copies, from the program state and RNG state the first run had
        (what the original's run changed is put back first): for gradients, or the check below."""
        self._put_back(state)
        prepared.rng.restore()
        swapped = _swap_buffers(sides.impl_module, prepared)
        return sides.impl(*spare.copies[0], **spare.copies[1]), swapped

    def _unsteady(
        self,
        sides: Sides,
        prepared: Prepared,
        spare: Spare,
        output: Any,
        again: tuple[Any, Any] | None,
        state: ProgramState,
    ) -> bool:
        """Whether the impl itself gives another result on the same inputs (``torch.empty``'s memory, atomics):
        then a difference from upstream says nothing, and the target is not compared. Asked only on a difference."""
        try:
            if again is None:
                again = self._run_impl_again(sides, prepared, spare, state)
        except Aborted:
            raise
        except BaseException as exc:
            if is_stop_request(exc):
                raise
            return False
        check = _outputs(output, again[0]) + _changed(prepared, again[1], spare)
        if any(d.differs for d in check):
            worst = next(d for d in check if d.differs)
            self.result.stopped = True
            self.result.note(
                f"{self.label}two runs of the impl on the same inputs differ ({worst.describe()}): its result is not "
                "determined by its inputs (uninitialised memory, atomics), so a difference from upstream proves nothing"
            )
            return True
        return False

    def _gradients(
        self,
        call: int,
        sides: Sides,
        prepared: Prepared,
        spare: Spare,
        output: Any,
        upstream: Any,
        state: ProgramState,
        pulled: Pulled,
    ) -> tuple[list[TensorDiff], tuple[Any, Any] | None]:
        cotangents = _cotangents(output, self._seed + call)
        theirs = _pull_back(upstream, cotangents, _leaves(prepared.copies, sides.original_module))
        try:
            again = self._run_impl_again(sides, prepared, spare, state)
            ours = _pull_back(again[0], cotangents, _leaves(spare.copies, sides.impl_module))
        except Aborted as exc:
            self.result.note(f"{self.label}gradients not compared: the impl's second run stopped ({exc})")
            return [], None
        except BaseException as exc:
            if is_stop_request(exc):
                raise
            self.result.note(f"{self.label}gradients not compared: the impl's second run raised {_short(exc)}")
            return [], None
        diffs = []
        pulled.cotangents = cotangents
        for name in dict.fromkeys([*ours, *theirs]):
            mine, other = ours.get(name), theirs.get(name)
            mine, other = _zeros_for_none(mine, other), _zeros_for_none(other, mine)
            pulled.ours[f"grad of {name}"], pulled.theirs[f"grad of {name}"] = mine, other
            diff = diff_leaf(f"grad of {name}", mine, other)
            if diff is not None:
                diffs.append(diff)
        return diffs, again


def run(
    comparison: Comparison,
    impl: Callable[..., Any],
    original: Callable[..., Any],
    receiver: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """One call through a compare wrapper: the impl's result, and (within the first N) the compare beside it."""
    call = comparison.take()
    if call is None:
        return impl(*args, **kwargs)
    sides, call_args = _sides(impl, original, receiver, args)
    prepared = comparison.prepare(sides, call_args, kwargs)
    output = impl(*args, **kwargs)
    if prepared is not None:
        comparison.finish(call, sides, prepared, output)
    return output


def _sides(
    impl: Callable[..., Any], original: Callable[..., Any], receiver: bool, args: tuple[Any, ...]
) -> tuple[Sides, tuple[Any, ...]]:
    """A method on a module runs on that module on both sides (its parameters are the gradients' leaves)."""
    if receiver and args and isinstance(args[0], torch.nn.Module):
        module = args[0]
        sides = Sides(functools.partial(impl, module), functools.partial(original, module), module, module)
        return sides, args[1:]
    return Sides(impl, original), args


def _packages(target: str) -> tuple[str, ...]:
    """Whose globals are program state for a call of ``target``: megatron's, and the target's own package's
    (not torch's, for the CUDA-on-CPU targets: over a thousand modules, and caches torch fills as it runs)."""
    root = target.partition(".")[0]
    return ("megatron",) if root in ("megatron", "torch") else ("megatron", root)


def plain_now() -> bool:
    """Whether this call must not be compared at all: torch not loaded, inside a backward pass (activation
    recompute runs forwards there), or while a CUDA graph is being captured."""
    torch_module = sys.modules.get("torch")
    if torch_module is None or not hasattr(torch_module, "autograd"):
        return True
    try:
        if torch._C._current_graph_task_id() != -1:
            return True
        return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001
        return False


def _receiver(value: object) -> bool:
    return isinstance(value, torch.optim.Optimizer)


def _labelled(label: str, diff: TensorDiff) -> TensorDiff:
    if label:
        diff.name = f"{label}{diff.name}"
    return diff


def _short(exc: BaseException) -> str:
    """``Type: message``, and where it was raised when the message is empty (a bare ``assert``)."""
    text = " ".join(str(exc).split())
    if not text:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            where = frames[-1]
            parts = where.filename.replace(os.sep, "/").split("/")
            text = f"at {'/'.join(parts[-3:])}:{where.lineno} ({(where.line or '').strip()[:80]})"
    text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= 240 else text[:237] + "..."


@dataclass
class Pulled:
    """One call's compared values by leaf name (outputs, gradients), and the cotangents the gradients pulled back."""

    cotangents: dict[str, torch.Tensor]
    ours: dict[str, Any]
    theirs: dict[str, Any]


_SIXTEEN = (torch.bfloat16, torch.float16)
# torch's factories whose result is uninitialised memory (their documentation says so): values never compared.
UNINITIALISED = frozenset(
    f"torch.{name}"
    for name in (
        "empty",
        "empty_like",
        "empty_strided",
        "empty_permuted",
        "Tensor.new_empty",
        "Tensor.new_empty_strided",
    )
)


def _replayable(diff: TensorDiff) -> bool:
    """A leaf that differs by its numbers (not its kind, shape or dtype) in a 16-bit float type."""
    return diff.differs and not diff.cause and diff.dtype in ("bfloat16", "float16")


def _sixteen_bit(copies: tuple[Any, Any], module: torch.nn.Module | None) -> bool:
    """Whether a call computes in 16 bits: a 16-bit float input, or a module receiver's 16-bit parameter."""
    if any(t.dtype in _SIXTEEN for _, t in [*tensors_in(copies[0], "a"), *tensors_in(copies[1], "k")]):
        return True
    return module is not None and any(p.dtype in _SIXTEEN for p in module.parameters())


def _upcast(value: Any, *, leaves: bool = False) -> Any:
    """The same structure with each 16-bit float tensor as float32 and each 16-bit dtype named as float32. ``leaves``:
    the tensors become new leaves (a copy that required grad still does: the replay's inputs); else ``.float()``, on
    the autograd graph (the arguments of one torch call inside the replay)."""
    if isinstance(value, torch.Tensor):
        if value.dtype not in _SIXTEEN:
            return value
        return value.detach().float().requires_grad_(value.requires_grad) if leaves else value.float()
    if isinstance(value, torch.dtype):
        return torch.float32 if value in _SIXTEEN else value
    if isinstance(value, dict):
        return {k: _upcast(v, leaves=leaves) for k, v in value.items()}
    if isinstance(value, list | tuple):
        items = [_upcast(v, leaves=leaves) for v in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else type(value)(items)
    return value


def _float32_parameters(module: torch.nn.Module | None) -> dict[str, torch.Tensor]:
    """Float32 leaves for a module's 16-bit parameters (by name), for the replay's call only."""
    if module is None:
        return {}
    return {
        name: p.detach().float().requires_grad_(p.requires_grad)
        for name, p in module.named_parameters()
        if p.dtype in _SIXTEEN
    }


class _Float32Mode(torch.overrides.TorchFunctionMode):
    """Upstream's code computing in float32 where it would compute in 16 bits: every torch call made inside gets
    its 16-bit tensors as float32 and any 16-bit dtype it names as float32 (a cast to bf16, a factory's dtype, a
    module that casts softmax probabilities back to its config's dtype), so the replay is the same computation at
    the higher precision, not a mix. (Inside ``__torch_function__`` the mode is off, so the casts here do not
    recurse.) Code outside torch's Python API (a vendor's extension) gets float32 tensors and may refuse them: the
    replay then raises and the 16-bit leaves are judged by the thresholds alone, said in a note."""

    _TO_FLOAT = (torch.Tensor.bfloat16, torch.Tensor.half)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in self._TO_FLOAT:
            return args[0].float()
        return func(*_upcast(tuple(args)), **_upcast(kwargs or {}))


def _eager() -> Any:
    """A ``with`` block in which torch.compile'd functions run eagerly (``torch.compiler.set_stance``).

    Why: the compare runs upstream's original (and the impl again) on copies, and a compiled function reached there
    would be traced for those copies (other strides, leaves where the program has non-leaves): dynamo adds the graph to
    its process-wide cache, and the program's later calls can take it. A compiled graph draws dropout's random numbers
    its own way (Inductor's philox from a seed), not as eager dropout does: on Megatron-LM's pretrain_gpt.py at EP=2
    that changed the second layer's dropout masks and the step's loss (4.893719 -> 4.893867) though the RNG states
    were put back. Eager inside the compare leaves dynamo's cache as the program alone makes it."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    return set_stance("force_eager") if set_stance is not None else contextlib.nullcontext()


def _reparametrized(module: torch.nn.Module | None, params: dict[str, torch.Tensor]) -> Any:
    """The module with ``params`` in place of its own for a ``with`` block (torch's stateless reparametrization)."""
    if module is None or not params:
        return contextlib.nullcontext()
    from torch.nn.utils.stateless import _reparametrize_module

    return _reparametrize_module(module, params)


@dataclass
class Spare:
    """A second set of copies (made from the first before the original ran), for the impl's second run."""

    inputs: Inputs
    copies: tuple[tuple[Any, ...], dict[str, Any]]


def _copy(inputs: Inputs, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Copies of a call's arguments, named by position (the same names for every set of copies of one call)."""
    return (
        tuple(inputs.copy(a, "self" if i == 0 and _receiver(a) else f"arg {i}") for i, a in enumerate(args)),
        {key: inputs.copy(value, f"kwarg {key}") for key, value in kwargs.items()},
    )


def _copy_again(copies: tuple[tuple[Any, ...], dict[str, Any]]) -> Spare:
    inputs = Inputs()
    return Spare(inputs, _copy(inputs, *copies))


def _outputs(output: Any, upstream: Any) -> list[TensorDiff]:
    ours, theirs = _leaves_of(output), _leaves_of(upstream)
    diffs = []
    for name in dict.fromkeys([*ours, *theirs]):
        if name not in ours or name not in theirs:
            side = "only upstream" if name not in ours else "only the impl"
            diffs.append(TensorDiff(name, "-", (), differs=True, cosine=None, cause=f"{side} returns it"))
            continue
        diff = diff_leaf(name, ours[name], theirs[name])
        if diff is not None:
            diffs.append(diff)
    return diffs


def _leaves_of(value: Any, name: str = "output") -> dict[str, Any]:
    """The leaves of a result by path: tensors, numbers and None inside tuples, lists, dicts, namedtuples."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _leaves_of(item, f"{name}[{key!r}]").items()}
    if isinstance(value, list | tuple):
        fields = getattr(type(value), "_fields", None)
        return {
            k: v
            for index, item in enumerate(value)
            for k, v in _leaves_of(item, f"{name}.{fields[index]}" if fields else f"{name}[{index}]").items()
        }
    if value is None or isinstance(value, torch.Tensor | bool | int | float):
        return {name: value}
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray) and value.dtype != object:
        return {
            name: torch.from_numpy(value)
        }  # the tensor of its values (a CPU pack returns numpy where upstream does)
    return {name: value} if any(True for _ in tensors_in(value)) else {}


def _changed(prepared: Prepared, swapped: dict[tuple[str, str], torch.Tensor], spare: Spare | None) -> list[TensorDiff]:
    """Tensors written in place, the program's (by the impl) against the other run's: the inputs, an optimizer's
    state, a module receiver's buffers. The other run is the original's on the first copies (``spare`` None), or
    the impl's second run on the spare copies, matched by name."""
    diffs = []
    theirs = {name: made for name, _, made in (spare.inputs.pairs if spare else prepared.inputs.pairs)}
    fresh = {id(made) for made in theirs.values()}
    for name, real, made in prepared.inputs.pairs:
        other = theirs.get(name, made)
        moved = real._version != prepared.inputs.versions[id(real)] or (other._version != 0 and id(other) in fresh)
        if moved:
            diff = diff_leaf(f"{name} after the call", real, other)
            if diff is not None:
                diffs.append(diff)
    their_optimizers = {
        name: made for name, _, made in (spare.inputs.optimizers if spare else prepared.inputs.optimizers)
    }
    for name, real_optimizer, made_optimizer in prepared.inputs.optimizers:
        other_optimizer = their_optimizers.get(name, made_optimizer)
        ours = [p for group in real_optimizer.param_groups for p in group["params"]]
        others = [p for group in other_optimizer.param_groups for p in group["params"]]
        for index, (mine, theirs_param) in enumerate(zip(ours, others, strict=False)):
            state, other_state = real_optimizer.state.get(mine, {}), other_optimizer.state.get(theirs_param, {})
            for key in dict.fromkeys([*state, *other_state]):
                diff = diff_leaf(f"{name}.state[{index}][{key!r}]", state.get(key), other_state.get(key))
                if diff is not None:
                    diffs.append(diff)
    for key, clone in swapped.items():
        buffer = prepared.real_buffers.get(key)
        if buffer is not None and (buffer._version != prepared.versions[key] or clone._version != 0):
            diff = diff_leaf(f"buffer {'.'.join(filter(None, key))} after the call", buffer, clone)
            if diff is not None:
                diffs.append(diff)
    return diffs


def _swap_buffers(module: torch.nn.Module | None, prepared: Prepared) -> dict[tuple[str, str], torch.Tensor]:
    """Fresh clones (of the buffers as they were before the call) in place of a module's buffers: a forward
    that updates a buffer writes into the clone, which is compared, never into the program's."""
    swapped: dict[tuple[str, str], torch.Tensor] = {}
    if module is None or not prepared.buffers:
        return swapped
    modules = dict(module.named_modules())
    for (path, name), pristine in prepared.buffers.items():
        sub = modules.get(path)
        if sub is not None and sub._buffers.get(name) is not None:
            swapped[(path, name)] = sub._buffers[name] = pristine.clone()
    return swapped


def _restore_buffers(module: torch.nn.Module | None, prepared: Prepared) -> None:
    """The module's own buffers back (``ProgramState.put_back`` does it too; this does not depend on its walk)."""
    if module is None or not prepared.real_buffers:
        return
    modules = dict(module.named_modules())
    for (path, name), real in prepared.real_buffers.items():
        sub = modules.get(path)
        if sub is not None and name in sub._buffers:
            sub._buffers[name] = real


def _cotangents(output: Any, seed: int) -> dict[str, torch.Tensor]:
    """One random tensor per differentiable output, from a generator of the compare's own (same for both sides)."""
    cotangents = {}
    for index, (name, tensor) in enumerate(tensors_in(output, "output")):
        if tensor.requires_grad and (tensor.is_floating_point() or tensor.is_complex()):
            generator = torch.Generator(device=tensor.device).manual_seed(seed * 1000 + index)
            cotangents[name] = torch.randn(tensor.shape, generator=generator, device=tensor.device, dtype=tensor.dtype)
    return cotangents


def _leaves(copies: tuple[Any, Any], module: torch.nn.Module | None) -> dict[str, torch.Tensor]:
    """The tensors to differentiate with respect to: inputs that require grad, then the module's parameters."""
    leaves = {
        name: tensor
        for name, tensor in [*tensors_in(copies[0], "input"), *tensors_in(copies[1], "input")]
        if tensor.requires_grad and tensor.is_leaf
    }
    if module is not None:
        leaves.update((f"param {name}", p) for name, p in module.named_parameters() if p.requires_grad)
    return leaves


def _pull_back(result: Any, cotangents: dict[str, torch.Tensor], leaves: dict[str, torch.Tensor]) -> dict[str, Any]:
    outputs = [(name, t) for name, t in tensors_in(result, "output") if name in cotangents and t.requires_grad]
    if not outputs or not leaves:
        return {}
    grads = torch.autograd.grad(
        [t for _, t in outputs],
        list(leaves.values()),
        grad_outputs=[cotangents[name].to(t.dtype) for name, t in outputs],
        allow_unused=True,
    )
    return dict(zip(leaves, grads, strict=True))


def _zeros_for_none(value: Any, other: Any) -> Any:
    """A missing gradient counts as zeros where the other side has a tensor (an unused input is no difference)."""
    if value is None and isinstance(other, torch.Tensor) and not bool(other.any()):
        return torch.zeros_like(other)
    return value


def _report_difference(result: TargetResult, diff: TensorDiff, call: int) -> None:
    """The first difference of a target: one warning (strict: an error that ends the run), naming it."""
    from fl_patch.runtime import RUNTIME

    impl = _impl_of(result.target)
    RUNTIME.problems.problem(
        f"fl_patch --compare: {result.target} ({impl}) differs from upstream at call {call}: {diff.describe()}"
    )


def _impl_of(target: str) -> str:
    from fl_patch.runtime import RUNTIME

    try:
        for record in RUNTIME.engine.records(detect=False):
            if record.target == target and record.vendor == record.chosen_vendor:
                return f"vendor {record.vendor!r}: {record.impl}"
    except Exception:  # noqa: BLE001  (a name for a message: never a reason to fail)
        pass
    return "impl"
