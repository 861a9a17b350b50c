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

    def withdraw(self) -> None:
        """Torch's own ``set_device`` back (the packs load now, or it was called); nothing placed from here on."""
        self.finished = True
        cuda, stand_in = self._cuda, self._stand_in
        self._cuda = self._stand_in = None
        if cuda is not None and stand_in is not None and getattr(cuda, "set_device", None) is stand_in:
            cuda.set_device = self._original

    def _make_stand_in(self, cuda: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def set_device(device: Any) -> None:
            self.withdraw()
            if not cuda.is_available():
                self.install()  # the transfer's set_device is at torch.cuda.set_device now
            return cuda.set_device(device)

        return set_device
