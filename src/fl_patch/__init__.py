"""fl_patch: replace pieces of upstream Megatron at import time, with zero edits to it.

A registry module says what replaces what, exactly as with FlagScale's Override
Plugin Mechanism::

    from fl_patch import register
    register(target="megatron.core.optimizer.clip_grads.get_grad_norm_fp32",
             impl="my_plugin.clip_grads.get_grad_norm_fp32")

and, once fl_patch is installed (``python -m fl_patch train.py``, or the
sitecustomize in ``sitecustomize_template/``), each registered target is replaced
the moment its module finishes loading.

The modules behind this API, one purpose each: ``core.paths`` (dotted paths,
``method_key``), ``core.registry`` (registrations, vendor selection), ``core.vendors``
(``MG_FL_PREFER`` and platform detection), ``hooks`` (the ``sys.meta_path``
finder), ``engine.observer`` (what to patch as a module loads), ``core.apply`` (installing and
reverting one patch), ``core.bindings`` (names bound early), ``activation.sources`` (where
registrations come from), ``activation.install`` (install/uninstall), ``cli``.
"""

from __future__ import annotations

import sys

# Not ``from typing import TYPE_CHECKING``: importing typing costs ~3 ms at the start-up
# of every process that has the bootstrap on PYTHONPATH. Type checkers read this as theirs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from fl_patch.activation.install import install, is_installed, uninstall
    from fl_patch.core.errors import FlPatchError, FlPatchWarning
    from fl_patch.core.paths import method_key
    from fl_patch.core.records import PatchRecord, Status
    from fl_patch.core.registration import PatchDoc, Registration

__all__ = [
    "FlPatchError",
    "FlPatchWarning",
    "PatchDoc",
    "PatchRecord",
    "Registration",
    "Status",
    "install",
    "is_active",
    "is_installed",
    "method_key",
    "original",
    "register",
    "report",
    "uninstall",
]

__version__ = "0.1.0"


# First of all (host/cwd.py says why); then the process state (registry, engine, ...): cheap to import,
# its parts are built on first use.
from fl_patch.host.cwd import take_cwd_off_the_path  # noqa: E402
from fl_patch.runtime import RUNTIME  # noqa: E402

RUNTIME.launcher_cwd_entry = take_cwd_off_the_path()

"""The ``sys.path`` entry ``python -m fl_patch`` started with and the launcher took off (or None)."""

# The rest of the API is imported on first use (PEP 562): the bootstrap sitecustomize
# imports this package in every Python process, and one that never imports megatron
# should not pay for the engine.
_LAZY = {
    "method_key": "fl_patch.core.paths",
    "FlPatchError": "fl_patch.core.errors",
    "FlPatchWarning": "fl_patch.core.errors",
    "PatchRecord": "fl_patch.core.records",
    "PatchDoc": "fl_patch.core.registration",
    "Registration": "fl_patch.core.registration",
    "Status": "fl_patch.core.records",
    "install": "fl_patch.activation.install",
    "is_installed": "fl_patch.activation.install",
    "uninstall": "fl_patch.activation.install",
}


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def register(
    target: str,
    impl: object,
    vendor: str = "default",
    *,
    create: bool = False,
    requires: str | None = None,
    doc: PatchDoc | None = None,
) -> Registration:
    """Register ``impl`` to replace ``target`` when ``vendor`` is chosen.

    ``impl`` is a dotted path (``pkg.mod.func`` or ``pkg.mod:Cls.method``, imported
    only once the target's module has loaded) or the object itself. A string impl is
    always a path, never a value. ``create=True`` also installs it where the target
    does not exist (a backport, such as ``typing.override`` on Python 3.11). A
    malformed target or impl raises ``ValueError`` here; registering the same target
    and vendor again replaces the earlier registration, with a warning.
    ``requires="megatron-core>=0.19,<0.21"`` gates it on an installed version: outside the
    range it is not applied and is listed as "not for this version" (``fl_patch.core.gates``).
    ``doc=PatchDoc(why=..., how=..., upstream=..., remove_when=...)`` says why the patch exists
    (``fl-patch --list --why``).
    """
    caller = sys._getframe(1)
    return RUNTIME.registry.register(
        target,
        impl,
        vendor,
        source=str(caller.f_globals.get("__name__", "?")),
        create=create,
        where=(caller.f_code.co_filename, caller.f_lineno),
        requires=requires,
        doc=doc,
    )


def original(target: str) -> Any:
    """The upstream object behind ``target``, for an impl that calls through or wraps it.

    For a method this is the plain function (call it with ``self``); for a
    staticmethod or classmethod, the function inside the descriptor. Typed ``Any``:
    the object is whatever upstream defines (a function, a class to subclass), so that
    ``original(T)(...)`` and ``class Mine(original(T))`` type-check in a plugin.
    Works before the patch is installed, after, under ``--report`` and after
    ``uninstall()`` alike; raises ``LookupError`` while the target's module is not imported.
    """
    return RUNTIME.engine.original(target)


def report() -> list[PatchRecord]:
    """One record per registration, with its status (applied, waiting, ...)."""
    return RUNTIME.engine.records()


def is_active() -> bool:
    """Installed, or armed to install at the first megatron import (the sitecustomize way)."""
    from fl_patch.activation.startup import armed

    if armed():
        return True
    runtime = sys.modules.get(f"{__name__}.activation.runtime")  # never imported: never installed
    return bool(runtime is not None and runtime.RUNTIME.installed)
