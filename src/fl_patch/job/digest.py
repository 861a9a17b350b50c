"""A rank's patch state as rows, and a digest of them: what must be the same on every rank of a job.

Rows (``state_rows``), each a name and a short text:

- the versions of fl_patch, torch and megatron-core (``megatron-core`` is ``-`` where it is not installed);
- the modes that change results: ``strict``, ``deterministic`` (torch's switch and the
  ``FL_PATCH_DETERMINISTIC`` the FlagGems pack reads), ``compare`` (a setting of that name,
  where this fl_patch has one);
- a row per registered target: the vendor chosen and its impl, with the first 12 hex digits of
  the SHA-256 of the impl's source file (``cpu fl_patch.impls.cpu.rope.apply @3f2a...``), or
  what runs instead (``disabled``, ``upstream (impl failed)``, ...).

What a row deliberately leaves out: whether the target was *applied* yet or is still
*waiting* for its module (ranks import in their own order: rank 0 imports a logging module
the others never load), call counts, paths, host names. Two ranks with the same rows run the
same code for every patched target, at the same versions, in the same modes.

Only fl_patch's public API (``fl_patch.report()``) and the settings are read; a source file is
located without importing anything (a module not loaded yet is found on ``sys.path`` by the
path finder), and each file is hashed once per process.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import json
import os
import sys
from collections.abc import Iterable, Mapping

import fl_patch
from fl_patch.core.records import PatchRecord, Status

__all__ = ["PatchState", "impl_file", "patch_state", "state_rows"]

_NONE = "-"
_HASHES: dict[str, str] = {}  # source file -> hash (a file does not change under a running job)
_FILES: dict[str, str] = {}  # impl -> its source file
_LAST: list[tuple[object, object, PatchState]] = []  # the last state: the engine version and records it is of


class PatchState:
    """The rows of one process and their digest (16 hex digits of SHA-256 over the rows)."""

    __slots__ = ("digest", "rows")

    def __init__(self, rows: Mapping[str, str]) -> None:
        self.rows = dict(rows)
        self.digest = hashlib.sha256(json.dumps(self.rows, sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(self.rows, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> PatchState:
        return cls(json.loads(text))


@functools.cache  # an installed distribution's version does not change under a running job
def _version(distribution: str) -> str:
    try:
        import importlib.metadata as metadata

        return metadata.version(distribution)
    except Exception:  # noqa: BLE001  (not installed, or broken metadata: the row says so)
        return _NONE


def _megatron_version() -> str:
    # The installed distribution, else the loaded package's own (a source tree on PYTHONPATH).
    version = _version("megatron-core")
    if version != _NONE:
        return version
    info = sys.modules.get("megatron.core.package_info")
    return str(getattr(info, "__version__", _NONE))


def _torch_deterministic() -> str:
    torch = sys.modules.get("torch")
    check = getattr(torch, "are_deterministic_algorithms_enabled", None)
    try:
        return "on" if check is not None and check() else "off"
    except Exception:  # noqa: BLE001
        return "?"


def _switch(value: object) -> str:
    if value is None:
        return _NONE
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _locate(module: str) -> str | None:
    """The source file of ``module``: the loaded module's, else found by the path finder, never imported."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        return getattr(loaded, "__file__", None)
    path: list[str] | None = None
    spec = None
    parts = module.split(".")
    for i in range(len(parts)):
        name = ".".join(parts[: i + 1])
        parent = sys.modules.get(name)
        if parent is not None and i < len(parts) - 1:
            path = list(getattr(parent, "__path__", []) or [])
            continue
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    return getattr(spec, "origin", None) if spec is not None else None


def impl_file(impl: str) -> str | None:
    """The source file of an impl named ``pkg.mod.func`` or ``pkg.mod:Cls.method`` (the longest module prefix found)."""
    if impl in _FILES:
        return _FILES[impl]
    found = _find_impl_file(impl)
    if found is not None:  # (one not found yet may be found once its package is on sys.path)
        _FILES[impl] = found
    return found


def _find_impl_file(impl: str) -> str | None:
    if ":" in impl:
        candidates = [impl.partition(":")[0]]
    else:
        parts = impl.split(".")
        candidates = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
    for module in candidates:
        try:
            found = _locate(module)
        except (ImportError, ValueError, AttributeError):
            found = None
        if found and os.path.isfile(found):
            return found
    return None


def _file_hash(path: str | None) -> str:
    if path is None:
        return "?"
    cached = _HASHES.get(path)
    if cached is None:
        try:
            with open(path, "rb") as handle:
                cached = hashlib.sha256(handle.read()).hexdigest()[:12]
        except OSError:
            cached = "?"
        _HASHES[path] = cached
    return cached


def _target_value(record: PatchRecord) -> str:
    if record.status is Status.DISABLED:
        return "disabled"
    if record.status is Status.NOT_FOR_VERSION:
        return "not for this version"
    if record.status in (Status.TARGET_MISSING, Status.IMPL_FAILED):
        return f"upstream ({record.status.value})"
    if record.chosen_vendor is None:
        return "upstream (no impl for these vendors)"
    return f"{record.vendor} {record.impl} @{_file_hash(impl_file(record.impl))}"


def _target_rows(records: Iterable[PatchRecord]) -> dict[str, str]:
    rows: dict[str, str] = {}
    by_target: dict[str, list[PatchRecord]] = {}
    for record in records:
        by_target.setdefault(record.target, []).append(record)
    for target, own in sorted(by_target.items()):
        chosen = next((r for r in own if r.vendor == r.chosen_vendor), None)
        if chosen is None:  # every registration is for another vendor, or each one failed
            chosen = next((r for r in own if r.status.is_problem), own[0])
        rows[target] = _target_value(chosen)
    return rows


def state_rows(records: Iterable[PatchRecord], settings: object) -> dict[str, str]:
    """The rows of a process whose ``fl_patch.report()`` gave ``records``, under ``settings`` (``Settings``)."""
    rows = {
        "fl_patch version": fl_patch.__version__,
        "torch version": _version("torch"),
        "megatron-core version": _megatron_version(),
        "strict": _switch(getattr(settings, "strict", None)),
        "compare": _switch(getattr(settings, "compare", None)),  # the numerics comparison mode, where it exists
        # FL_PATCH_DETERMINISTIC is the FlagGems pack's switch (it reads it itself); torch's own is the program's.
        "deterministic": f"torch {_torch_deterministic()}, FL_PATCH_DETERMINISTIC={os.environ.get('FL_PATCH_DETERMINISTIC', '') or _NONE}",
    }
    rows.update(_target_rows(records))
    return rows


def patch_state(settings: object) -> PatchState:
    """This process's state now: ``fl_patch.report()`` under ``settings``.

    Computed again only when the records or the modes changed since the last call (a job
    creates dozens of groups, each checked, and the state is the same for nearly all).
    """
    modes = (
        tuple(getattr(settings, name, None) for name in ("strict", "compare")),
        _torch_deterministic(),
        os.environ.get("FL_PATCH_DETERMINISTIC"),
    )
    installed = fl_patch.is_installed()
    version = _engine_version() if installed else ("not installed",)
    if version is not None and _LAST and _LAST[0][0] == (version, modes):
        return _LAST[0][2]  # nothing recorded changed since: no walk of every registration (ORACLE_FINDINGS.md, 12)
    records = fl_patch.report() if installed else []
    key = (tuple((r.target, r.vendor, r.impl, r.status, r.chosen_vendor) for r in records), modes)
    if _LAST and _LAST[0][1] == key:
        state = _LAST[0][2]
    else:
        state = PatchState(state_rows(records, settings))
    _LAST[:] = [((version, modes), key, state)]
    return state


def _engine_version() -> tuple[object, ...] | None:
    from fl_patch.runtime import RUNTIME

    return RUNTIME.engine.state_version()
