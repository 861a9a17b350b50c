"""A stand-in for FlagScale's own ``megatron/plugin/decorators.py``, written for fl_patch's tests.

It behaves as FlagScale's does (Megatron-LM-FL): ``register`` stores impl *strings* under
FlagScale's short key (the target's last two segments) in ``_lazy_registry``; eager impls
(``override``, ``register_override_method``) live in ``_plugin_registry``;
``get_override_method`` picks the preferred vendor (``MG_FL_PREFER``, else the selected
platform), then ``default``; ``overridable`` dispatches at call time and keeps the
original as ``__wrapped__``. fl_patch must leave all of it working while it also receives
every ``register`` call.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os

logger = logging.getLogger(__name__)

_DEFAULT_VENDOR = "default"
_plugin_registry: dict[str, dict[str, object]] = {}
_lazy_registry: dict[str, dict[str, str]] = {}
_plugin_impl_cache: dict[object, object] = {}
_original_impl_cache: set[object] = set()


def _get_preferred_vendor() -> str | None:
    value = os.environ.get("MG_FL_PREFER")
    if value is not None:
        return value.strip().lower() or None
    try:
        from megatron.plugin.platform import platform_manager
    except Exception:  # noqa: BLE001
        return None
    current = platform_manager.cur_platform
    return current.device_name() if current is not None else None


def _target_to_method_key(target: str) -> str:
    parts = target.split(".")
    return ".".join(parts[-2:]) if len(parts) >= 2 else target


def register_override_method(method_key: str, implementation: object, vendor: str = _DEFAULT_VENDOR) -> None:
    _plugin_registry.setdefault(method_key, {})[vendor.lower()] = implementation


def register(target: str, impl: str, vendor: str = _DEFAULT_VENDOR) -> None:
    _lazy_registry.setdefault(_target_to_method_key(target), {})[vendor.lower()] = impl


def _resolve_lazy_impl(method_key: str) -> object | None:
    choices = _lazy_registry.get(method_key)
    if not choices:
        return None
    vendor = _get_preferred_vendor()
    path = choices.get(vendor) if vendor else None
    path = path or choices.get(_DEFAULT_VENDOR)
    if path is None:
        return None
    module_name, _, attr = path.rpartition(".")
    try:
        impl = getattr(importlib.import_module(module_name), attr)
    except Exception:  # noqa: BLE001  (FlagScale logs this at debug level)
        logger.debug("could not load %s", path)
        return None
    register_override_method(method_key, impl, vendor if choices.get(vendor) else _DEFAULT_VENDOR)
    return impl


def get_override_method(method_key: str) -> object | None:
    eager = _plugin_registry.get(method_key)
    if eager:
        vendor = _get_preferred_vendor()
        if vendor and vendor in eager:
            return eager[vendor]
        return eager.get(_DEFAULT_VENDOR)
    return _resolve_lazy_impl(method_key)


def override(class_or_module_name: str, name: str, vendor: str = _DEFAULT_VENDOR):
    def decorate(func):
        register_override_method(f"{class_or_module_name}.{name}", func, vendor)
        return func

    return decorate


def overridable(func):
    key = f"{func.__module__.rsplit('.', 1)[-1]}.{func.__name__}"

    @functools.wraps(func)
    def dispatch(*args, **kwargs):
        if func in _plugin_impl_cache:
            return _plugin_impl_cache[func](*args, **kwargs)
        if func not in _original_impl_cache:
            impl = get_override_method(key)
            if impl is not None:
                _plugin_impl_cache[func] = impl
                return impl(*args, **kwargs)
            _original_impl_cache.add(func)
        return func(*args, **kwargs)

    return dispatch
