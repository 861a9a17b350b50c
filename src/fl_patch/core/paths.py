"""Dotted paths: validating targets and impls, and FlagScale's ``method_key``.

A *target* names what is replaced (``megatron.core.optimizer.clip_grads.get_grad_norm_fp32``),
an *impl* names the replacement. Both are plain dotted paths. They are validated when
``register()`` is called, not when the target's module loads, so that a typo in a registry
fails at the line that made it, naming it.
"""

from __future__ import annotations

import keyword

__all__ = ["method_key", "parse_impl_path", "parse_target", "parse_vendor"]


def _bad(kind: str, value: object, cause: str) -> ValueError:
    return ValueError(f"fl_patch: invalid {kind} {value!r}: {cause}")


def _dotted_parts(kind: str, value: object) -> list[str]:
    if not isinstance(value, str):
        raise _bad(kind, value, f"expected a dotted path string, got {type(value).__name__}")
    if not value:
        raise _bad(kind, value, "empty")
    if value != value.strip() or any(ch.isspace() for ch in value):
        raise _bad(kind, value, "contains whitespace")
    if value.startswith("."):
        raise _bad(kind, value, "relative paths (leading '.') are not allowed")
    parts = value.split(".")
    for part in parts:
        if not part:
            raise _bad(kind, value, "empty segment ('..' or trailing '.')")
        if not part.isidentifier():
            raise _bad(kind, value, f"segment {part!r} is not a Python identifier")
        if keyword.iskeyword(part):
            raise _bad(kind, value, f"segment {part!r} is a Python keyword")
    return parts


def parse_target(target: object) -> tuple[str, ...]:
    """Validate ``target`` and return its segments.

    A target needs at least two segments: a module and something inside it (an
    attribute, a class member, or a submodule that is replaced whole).
    """
    parts = _dotted_parts("target", target)
    if len(parts) < 2:
        raise _bad("target", target, "name a module and an attribute or submodule inside it")
    return tuple(parts)


def parse_impl_path(impl: str) -> tuple[str, tuple[str, ...]]:
    """Validate a string impl and split it into (import path, attribute path).

    ``pkg.mod.func`` leaves the split to import time (the longest importable prefix
    is the module); ``pkg.mod:Cls.method`` fixes it, as entry points do. For the
    first form the attribute path returned is empty.
    """
    if isinstance(impl, str) and impl.count(":") == 1:
        module_path, attr_path = impl.split(":")
        _dotted_parts("impl", module_path)
        return module_path, tuple(_dotted_parts("impl", attr_path))
    if isinstance(impl, str) and ":" in impl:
        raise _bad("impl", impl, "more than one ':'")
    return ".".join(_dotted_parts("impl", impl)), ()


def parse_vendor(vendor: object) -> str:
    """Validate a vendor name; vendors compare case-insensitively."""
    if not isinstance(vendor, str):
        raise _bad("vendor", vendor, f"expected a string, got {type(vendor).__name__}")
    name = vendor.strip().lower()
    if not name or not name.replace("-", "_").isidentifier():
        raise _bad("vendor", vendor, "expected a name such as 'default', 'cpu' or 'musa'")
    return name


def method_key(target: str) -> str:
    """FlagScale's internal key for ``target``.

    FlagScale's two rules give the same shape: a module-level function or class is
    ``<module basename>.<name>`` and a method (second-to-last segment capitalised, so a
    class) is ``<ClassName>.<method>``; both are the last two segments.

    >>> method_key("megatron.core.optimizer.clip_grads.get_grad_norm_fp32")
    'clip_grads.get_grad_norm_fp32'
    >>> method_key("megatron.core.optimizer.optimizer.MixedPrecisionOptimizer.step")
    'MixedPrecisionOptimizer.step'
    """
    parts = parse_target(target)
    return f"{parts[-2]}.{parts[-1]}"


def is_method_target(target: str) -> bool:
    """FlagScale's rule for telling a method target: the segment before the last is a class."""
    parts = parse_target(target)
    return parts[-2][:1].isupper()
