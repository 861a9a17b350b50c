"""The CUDA-on-CPU transfer at the program's first ``torch.cuda.set_device``, when that comes before megatron.

A CUDA training script usually starts ``torch.cuda.set_device(local_rank)`` and imports megatron
after. fl_patch's packs, the CUDA-on-CPU transfer among them, load at the first megatron import
(docs/reliability.md, blast radius: a process that never imports megatron keeps torch as it is), so
on a machine without CUDA that first line died under ``python -m fl_patch`` with ``AttributeError:
module 'torch._C' has no attribute '_cuda_setDevice'`` before megatron was ever imported.

So, while fl_patch is armed and the transfer may apply (on, and its pack not left out by
``FL_PATCH_PACKS``), the first import statement after which ``torch.cuda`` has loaded puts a stand-in
at ``torch.cuda.set_device``. Called, it puts torch's own back and, where CUDA is not available
(the call would fail), installs fl_patch with the ``cuda_on_cpu`` pack now and calls the transferred
``set_device``; where CUDA is available, it calls torch's own. Only a call that would fail changes:
``torch.cuda.device_count()``, ``is_available()`` and the rest stay torch's until megatron loads
(or ``FL_PATCH_TRIGGERS=torch`` asks for the transfer at torch's import).

Any other first CUDA use before megatron (``model.cuda()``, ``torch.zeros(..., device="cuda")``) reaches torch's
``torch.cuda._lazy_init``, which the C++ side calls by name, in the middle of the operation: too late to transfer
that call. A stand-in there lets torch's error through with what to set: ``FL_PATCH_TRIGGERS=torch``, or
``torch.cuda.set_device`` first, or megatron imported first.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from fl_patch.config.settings import Settings

__all__ = ["CudaUseWatch", "wanted"]

PACK = "cuda_on_cpu"


def wanted(settings: Settings) -> bool:
    """Whether this process may need the transfer before megatron: it is on, and its pack is not left out."""
    if not settings.cuda_on_cpu or "torch" in {name.partition(".")[0] for name in settings.triggers}:
        return False  # off, or torch's import installs fl_patch with its packs already
    return settings.packs is None or PACK in settings.packs


class CudaUseWatch:
    """The stand-in at ``torch.cuda.set_device``, from the import after which ``torch.cuda`` has loaded until it is
    called or the packs load (``withdraw``: then the transfer, or torch, is what stands there)."""

    def __init__(self, install: Callable[[], object]) -> None:
        self.install = install  # installs fl_patch with the cuda_on_cpu pack loaded (startup._install_with_transfer)
        self.finished = False  # placed, or no longer wanted: the import hook stops asking
        self._cuda: Any = None
        self._original: Callable[..., Any] | None = None
        self._stand_in: Callable[..., Any] | None = None
        self._lazy_init: tuple[Callable[..., Any], Callable[..., Any]] | None = None  # (torch's, the stand-in)

    def after_import(self) -> None:
        """Called after each import statement until finished: a dict lookup until torch.cuda is there."""
        if self.finished:
            return
        cuda: Any = sys.modules.get("torch.cuda")
        if cuda is None or getattr(getattr(cuda, "__spec__", None), "_initializing", False):
            return
        original = getattr(cuda, "set_device", None)
        self.finished = True
        if not callable(original):
            return
        self._cuda, self._original = cuda, original
        self._stand_in = self._make_stand_in(cuda, original)
        cuda.set_device = self._stand_in
        lazy_init = getattr(cuda, "_lazy_init", None)
        if callable(lazy_init):
            self._lazy_init = (lazy_init, self._make_lazy_init(cuda, lazy_init))
            cuda._lazy_init = self._lazy_init[1]

    def withdraw(self) -> None:
        """Torch's own ``set_device`` back (the packs load now, or it was called); nothing placed from here on."""
        self.finished = True
        cuda, stand_in = self._cuda, self._stand_in
        self._cuda = self._stand_in = None
        if cuda is not None and stand_in is not None and getattr(cuda, "set_device", None) is stand_in:
            cuda.set_device = self._original
        lazy, self._lazy_init = self._lazy_init, None
        if cuda is not None and lazy is not None and getattr(cuda, "_lazy_init", None) is lazy[1]:
            cuda._lazy_init = lazy[0]

    def _make_lazy_init(self, cuda: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def _lazy_init() -> Any:
            try:
                return original()
            except (AssertionError, RuntimeError) as exc:
                if cuda.is_available():
                    raise
                raise type(exc)(
                    f"{exc}. fl_patch: this program used CUDA before it imported megatron, and on a machine without "
                    "CUDA the CUDA-on-CPU transfer starts at the first megatron import (or at torch.cuda.set_device): "
                    "set FL_PATCH_TRIGGERS=torch to start it when torch is imported (docs/cuda_on_cpu.md)"
                ) from exc

        return _lazy_init

    def _make_stand_in(self, cuda: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def set_device(device: Any) -> None:
            self.withdraw()
            if not cuda.is_available():
                self.install()  # the transfer's set_device is at torch.cuda.set_device now
            return cuda.set_device(device)

        return set_device
