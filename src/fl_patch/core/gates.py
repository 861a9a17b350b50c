"""Version gates: ``register(..., requires="megatron-core>=0.19,<0.21")``.

Why: a target moves between releases (``moe/paged_stash.py`` became
``moe/ops/paged_stash.py`` in 0.19; ``training/utils.py`` became
``training/utils/common_utils.py`` in 0.18). A pack that supports several releases
registers each place with the range where it exists; on another release that
registration is *not for this version*: not applied, listed as such, never an error.
(The form is a PEP 508 requirement without extras or markers, as OpenTelemetry
instrumentors' ``_instruments`` and AMD Primus' patch conditions declare theirs.)

The installed version is read from the distribution's metadata; for ``megatron-core``
installed from a source tree without metadata (a Megatron-LM checkout on
``PYTHONPATH``) from ``megatron/core/package_info.py``, read as text, never imported.
A distribution that is not installed satisfies no gate. Pre-releases count as their
release (``0.20.0rc0`` is in ``>=0.19``): Megatron-LM main carries the next version.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from dataclasses import dataclass

__all__ = ["Gate", "installed_version", "parse_gate"]


@dataclass(frozen=True)
class Gate:
    """A parsed ``requires=`` string."""

    text: str
    distribution: str
    specifier: str  # as written, normalised by packaging ("<0.21,>=0.19")

    def allows(self, version: str | None = None) -> bool:
        """Whether ``version`` (default: the installed one) is in the range."""
        from packaging.specifiers import SpecifierSet

        found = installed_version(self.distribution) if version is None else version
        if found is None:
            return False
        try:
            return SpecifierSet(self.specifier).contains(found, prereleases=True)
        except Exception:  # noqa: BLE001  (an installed version that is not PEP 440: nothing matches it)
            return False

    def describe(self, version: str | None = None) -> str:
        found = installed_version(self.distribution) if version is None else version
        here = f"{self.distribution} {found}" if found is not None else f"{self.distribution} not installed"
        return f"not for this version: requires {self.text} ({here})"


def parse_gate(requires: object, target: str) -> Gate | None:
    """``requires`` as a :class:`Gate`; ``ValueError`` naming ``target`` when it does not parse."""
    if requires is None:
        return None
    where = f"fl_patch: register(target={target!r}, requires={requires!r})"
    if not isinstance(requires, str) or not requires.strip():
        raise ValueError(f"{where}: requires must be a requirement string such as 'megatron-core>=0.19,<0.21'")
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        requirement = Requirement(requires)
    except InvalidRequirement as exc:
        raise ValueError(f"{where}: not a version requirement ({exc})") from None
    if requirement.extras or requirement.marker is not None or requirement.url is not None:
        raise ValueError(f"{where}: only 'distribution<specifiers>' is supported (no extras, markers or URLs)")
    if not str(requirement.specifier):
        raise ValueError(f"{where}: names no version range (write e.g. '{requirement.name}>=0.19')")
    return Gate(text=requires.strip(), distribution=requirement.name, specifier=str(requirement.specifier))


@functools.lru_cache(maxsize=32)
def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None; megatron-core also from a source tree."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        pass
    if distribution.replace("_", "-").lower() == "megatron-core":
        return _megatron_tree_version()
    return None


def _megatron_tree_version() -> str | None:
    spec = importlib.util.find_spec("megatron")  # a namespace package: nothing of it runs
    for base in getattr(spec, "submodule_search_locations", None) or ():
        found = package_info_version(os.path.join(base, "core", "package_info.py"))
        if found is not None:
            return found
    return None


def package_info_version(path: str) -> str | None:
    """``MAJOR.MINOR.PATCH[PRE_RELEASE]`` from a ``megatron/core/package_info.py``, read as text."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    parts = {}
    for name in ("MAJOR", "MINOR", "PATCH", "PRE_RELEASE"):
        match = re.search(rf"^{name}\s*=\s*['\"]?([0-9A-Za-z]*)['\"]?", text, re.MULTILINE)
        parts[name] = match.group(1) if match else ""
    if not (parts["MAJOR"] and parts["MINOR"]):
        return None
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH'] or 0}{parts['PRE_RELEASE']}"
