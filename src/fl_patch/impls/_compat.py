"""Which megatron-core releases the CPU pack was verified on, and one warning when it runs on another.

Every patch of the pack names upstream lines of a specific release; another release
may have moved, fixed or added CUDA assumptions. The pack still applies there (most
patches survive a minor release), but the user is told once, plainly.

The check reads the installed distribution's metadata (``importlib.metadata``), never
imports megatron, and runs when the pack is first *used* (an impl module of the pack is
imported because the ``cpu`` vendor was chosen and a target loaded), not when its
registry is read: on a GPU machine the pack is inert and says nothing.
"""

from __future__ import annotations

from fl_patch.core.errors import warn

__all__ = ["VERIFIED_MEGATRON_CORE", "installed_megatron_core", "unverified_message", "warn_if_unverified"]

VERIFIED_MEGATRON_CORE: tuple[str, ...] = ("0.17.1", "0.18.2", "0.19.2", "0.20.0")
"""megatron-core releases the CPU pack was run on: the whole test suite on 0.19.2; on each of the
others ``--check``, the demo and that release's ``pretrain_gpt.py`` (1 rank, TP=2, DP=2 with the
distributed optimizer and save/resume), ``bench/version_matrix.py`` (docs/versions.md). 0.20.0 is
Megatron-LM main as of commit d98e8a6, installed from its source tree."""

_warned = False


def installed_megatron_core() -> str | None:
    """The installed megatron-core version, or None when it is not installed."""
    # Imported here, not at the top: the registry imports this module at start-up, and
    # importlib.metadata costs ~25 ms there (megatron.core imports it later anyway).
    import importlib.metadata

    try:
        return importlib.metadata.version("megatron-core")
    except importlib.metadata.PackageNotFoundError:
        return None


def unverified_message(version: str | None) -> str | None:
    """The warning text for ``version``, or None if the pack was verified on it (or it is absent)."""
    if version is None or version in VERIFIED_MEGATRON_CORE:
        return None
    return (
        f"fl_patch CPU pack: installed megatron-core {version} is not a release it was verified on "
        f"({', '.join(VERIFIED_MEGATRON_CORE)}); its patches name upstream lines of those releases, "
        "so some may no longer match (a patch whose target is gone is reported) and new CUDA "
        "assumptions may not be covered"
    )


def warn_if_unverified() -> None:
    """Warn once per process if the installed megatron-core is not a verified release."""
    global _warned
    if _warned:
        return
    _warned = True
    message = unverified_message(installed_megatron_core())
    if message is not None:
        warn(message, stacklevel=2)
