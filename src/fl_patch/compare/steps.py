"""The whole-run compare's step records: each training step's loss and gradient norm, as megatron computes them.

Turned on by ``FL_PATCH_COMPARE_STEPS=PATH`` (``fl-patch compare`` sets it for both runs). As the modules
load, fl_patch wraps (observes, changes nothing):

- megatron-core's forward-backward schedules (``forward_backward_no_pipelining`` and the two pipelined
  ones, which ``get_forward_backward_func`` returns): a training call (not ``forward_only``) returns the
  micro-batches' loss reports; the step's loss is their mean, or, where a report is a
  ``[loss sum, token count]`` pair (Megatron-LM's ``pretrain_gpt.py``), their sum over their count;
- the ``step`` of megatron's optimizers (``MegatronOptimizer`` and its subclasses in
  ``megatron.core.optimizer.optimizer``; the outermost call only): it returns ``(update_successful,
  grad_norm, num_zeros_in_grad)``. One step record is written per optimizer step, with the losses
  reported since the previous one.

So it supports programs that train with megatron-core's schedules and optimizer: Megatron-LM's
``pretrain_gpt.py`` (``megatron.training``), ``examples/train_gpt.py``, FlagScale's trainers. Each
process appends ``{"rank", "step", "loss", "grad_norm", "skipped"}`` lines to PATH; the last pipeline
stage is the one with losses. Programs that do neither are read from their output instead
(``run.py``: megatron's training log line, ``step N ... loss X``, or a ``--step-regex``). A plugin that
replaces one of these functions replaces the observer with it: the output is read then too.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import types
from collections.abc import Callable
from typing import Any

__all__ = ["watch"]

SCHEDULES = "megatron.core.pipeline_parallel.schedules"
OPTIMIZERS = ("megatron.core.optimizer.optimizer",)
_SCHEDULE_FUNCTIONS = (
    "forward_backward_no_pipelining",
    "forward_backward_pipelining_with_interleaving",
    "forward_backward_pipelining_without_interleaving",
)
_MARK = "__fl_patch_compare_steps__"


class _Recorder:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.losses: list[tuple[float, float]] = []  # (sum, count) per micro-batch since the last step
        self.step = 0
        self.depth = threading.local()

    def add_losses(self, reports: Any) -> None:
        pairs = [pair for report in reports or () if (pair := _loss_pair(report)) is not None]
        with self.lock:
            self.losses.extend(pairs)

    def step_done(self, returned: Any) -> None:
        grad_norm, skipped = None, None
        if isinstance(returned, tuple) and len(returned) >= 2:
            skipped = not bool(returned[0])
            grad_norm = _number(returned[1])
        with self.lock:
            self.step += 1
            total = sum(count for _, count in self.losses)
            loss = sum(value for value, _ in self.losses) / total if total else None
            self.losses.clear()
            record = {"rank": _rank(), "step": self.step, "loss": loss, "grad_norm": grad_norm, "skipped": skipped}
        line = (json.dumps(record) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _rank() -> int:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001
        pass
    return int(os.environ.get("RANK", "0") or 0)


def _number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value.item() if hasattr(value, "item") else value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _loss_pair(report: Any) -> tuple[float, float] | None:
    """One micro-batch's report as (loss sum, count): ``{'lm loss': x}``, ``[sum, tokens]``, ``(sum, tokens)``."""
    if isinstance(report, dict):
        if not report:
            return None
        value = report.get("lm loss", next(iter(report.values())))
    else:
        value = report
    if isinstance(value, tuple | list) and len(value) == 2:
        total, count = _number(value[0]), _number(value[1])
        return (total, count) if total is not None and count else None
    numel = getattr(value, "numel", None)
    if callable(numel) and numel() == 2:
        return _loss_pair({"": (value[0], value[1])})
    number = _number(value)
    return None if number is None else (number, 1.0)


def _schedule(recorder: _Recorder, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def observed(*args: Any, **kwargs: Any) -> Any:
        reports = function(*args, **kwargs)
        if not kwargs.get("forward_only", False):
            recorder.add_losses(reports)
        return reports

    setattr(observed, _MARK, True)
    return observed


def _optimizer_step(recorder: _Recorder, step: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(step)
    def observed(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(recorder.depth, "value", 0)
        recorder.depth.value = depth + 1
        try:
            returned = step(self, *args, **kwargs)
        finally:
            recorder.depth.value = depth
        if depth == 0:  # a chained optimizer's inner steps are part of one step
            recorder.step_done(returned)
        return returned

    setattr(observed, _MARK, True)
    return observed


def _observe_schedules(recorder: _Recorder, module: types.ModuleType) -> None:
    for name in _SCHEDULE_FUNCTIONS:
        function = getattr(module, name, None)
        if callable(function) and not getattr(function, _MARK, False):
            setattr(module, name, _schedule(recorder, function))


def _observe_optimizers(recorder: _Recorder, module: types.ModuleType) -> None:
    base = getattr(module, "MegatronOptimizer", None)
    for value in list(vars(module).values()):
        if (
            isinstance(value, type)
            and base is not None
            and issubclass(value, base)
            and value.__module__ == module.__name__
        ):
            step = vars(value).get("step")
            if isinstance(step, types.FunctionType) and not getattr(step, _MARK, False):
                value.step = _optimizer_step(recorder, step)  # type: ignore[attr-defined]


def watch(path: str, engine: Any) -> None:
    """Observe the schedules and optimizers as their modules load (at once where they have loaded already)."""
    import sys

    recorder = _Recorder(path)
    for name, observe in ((SCHEDULES, _observe_schedules), *((m, _observe_optimizers) for m in OPTIMIZERS)):
        bound = functools.partial(observe, recorder)
        engine.on_load(name, bound)
        loaded = sys.modules.get(name)
        if isinstance(loaded, types.ModuleType):
            bound(loaded)
