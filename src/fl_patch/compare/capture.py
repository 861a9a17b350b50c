"""What a compared call works on: copies of its inputs, the program state it can reach, the RNG state.

Three things, each undoing or preventing one way that running upstream's original next to the impl
could change the program:

- ``Inputs``: copies of a call's arguments taken *before* the impl runs (an impl may change its
  arguments in place: an optimizer step, a gradient clip), so the original gets the values the impl
  got. Tensors are cloned (a ``Parameter`` stays one, with its ``grad`` and ``main_grad`` cloned
  too), containers rebuilt, a ``torch.optim.Optimizer`` copied with its parameters and state; other
  objects (a config, a process group) are shared as they are. Aliasing is kept (one tensor twice
  is one copy twice); two views of one storage become two independent copies.
- ``ProgramState``: every tensor and object reachable from the call's real arguments (``self``
  included: a module's parameters, buffers and their gradients, an optimizer's state) and from the
  globals of megatron and of the target's package (module globals, class attributes: megatron keeps
  state there, such as ``MoEAuxLossAutoScaler.main_loss_backward_scale``, which a backward sets when it
  finds it unset), found by a walk of containers, modules and objects' attributes (bounded). The guard
  (``guard.py``) refuses any in-place write into those tensors' storages while the original runs;
  and the Python-level state of every object reached (its attributes, a dict's items, a list's
  elements) is snapshotted after the impl's call and put back after the original's, so an
  original that sets ``self.cache = ...`` or replaces ``optimizer.state`` changes nothing.
- ``RngState``: torch's CPU generator, the accelerator's generators, megatron's CUDA RNG tracker, any
  ``torch.Generator`` passed to the call, Python's and numpy's global generators, saved and restored, so the original draws the random numbers the impl drew (the same dropout
  masks) and the program's own stream goes on as if nothing else had run.
"""

from __future__ import annotations

import copy
import dataclasses
import random as pyrandom
import sys
import types
from collections.abc import Iterator
from typing import Any, TypeGuard

import torch

__all__ = ["Inputs", "ProgramState", "RngState", "generators_in", "storage_key", "tensors_in"]

# The most objects the state walk visits, and the most attribute hops it takes from the arguments
# through objects that are not modules or containers (an optimizer's param_groups are 4 deep).
MAX_OBJECTS = 200_000
MAX_DEPTH = 6
_TENSOR_ATTRIBUTES = ("grad", "main_grad")


def storage_key(tensor: torch.Tensor) -> tuple[str, int] | None:
    """Where a tensor's data lives (device, address); None for tensors without plain storage."""
    try:
        storage = tensor.untyped_storage()
        return (str(storage.device), storage.data_ptr()) if storage.nbytes() else None
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested, functional wrappers
        return None


def _is_namedtuple(value: object) -> TypeGuard[tuple[Any, ...]]:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def _atomic(value: object) -> bool:
    if value is None or isinstance(value, str | bytes | int | float | complex | bool | type):
        return True
    return callable(value) and not isinstance(value, torch.nn.Module)  # functions, bound methods: nothing to walk


def tensors_in(value: object, name: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a result, with its path (``[0]``, ``['lm loss']``, ``.x``), depth first."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from tensors_in(item, f"{name}[{key!r}]")
    elif _is_namedtuple(value):
        fields: tuple[str, ...] = type(value)._fields  # type: ignore[attr-defined]  # a namedtuple's
        for key, item in zip(fields, value, strict=True):
            yield from tensors_in(item, f"{name}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from tensors_in(item, f"{name}[{index}]")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from tensors_in(getattr(value, item.name, None), f"{name}.{item.name}")


def generators_in(*values: object) -> tuple[torch.Generator, ...]:
    """The ``torch.Generator`` objects among a call's arguments (in containers too)."""
    found: list[torch.Generator] = []
    pending = list(values)
    while pending:
        value = pending.pop()
        if isinstance(value, torch.Generator):
            found.append(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)
    return tuple(dict.fromkeys(found))


class Inputs:
    """Copies of a call's arguments, and the pairs (path, real tensor, its copy) to compare after the call."""

    def __init__(self) -> None:
        self._memo: dict[int, object] = {}
        self._keep: list[object] = []  # the originals the memo's ids stand for, alive while it is used
        self.pairs: list[tuple[str, torch.Tensor, torch.Tensor]] = []
        self.versions: dict[int, int] = {}  # id(real tensor) -> its _version when copied
        self.optimizers: list[tuple[str, torch.optim.Optimizer, torch.optim.Optimizer]] = []

    def copy(self, value: Any, name: str) -> Any:
        known = self._memo.get(id(value))
        if known is not None:
            return known
        made = self._make(value, name)
        if made is not value:
            self._memo[id(value)] = made
            self._keep.append(value)
        return made

    def _make(self, value: Any, name: str) -> Any:
        if isinstance(value, torch.Tensor):
            return self._tensor(value, name)
        if isinstance(value, torch.optim.Optimizer):
            return self._optimizer(value, name)
        if isinstance(value, dict):
            made = copy.copy(value)  # the dict's own type (OrderedDict, defaultdict) and attributes
            for key, item in value.items():
                made[key] = self.copy(item, f"{name}[{key!r}]")
            return made
        if _is_namedtuple(value):
            fields: tuple[str, ...] = getattr(type(value), "_fields", ())
            items = [self.copy(item, f"{name}.{key}") for key, item in zip(fields, value, strict=True)]
            return type(value)(*items)
        if isinstance(value, list):
            return [self.copy(item, f"{name}[{index}]") for index, item in enumerate(value)]
        if isinstance(value, tuple):
            return tuple(self.copy(item, f"{name}[{index}]") for index, item in enumerate(value))
        return value  # shared: a config, a process group, a module (its state is protected, not copied)

    def _tensor(self, value: torch.Tensor, name: str) -> torch.Tensor:
        self.versions[id(value)] = value._version
        with torch.no_grad():
            data = value.detach().clone()
        grad_leaf = value.requires_grad and (data.is_floating_point() or data.is_complex())
        made: torch.Tensor
        if isinstance(value, torch.nn.Parameter):
            made = torch.nn.Parameter(data, requires_grad=value.requires_grad)
        else:
            made = data.requires_grad_(grad_leaf)
        for attribute, item in vars(value).items():  # megatron's marks (tensor_model_parallel, ...), main_grad
            setattr(made, attribute, self.copy(item, f"{name}.{attribute}") if isinstance(item, torch.Tensor) else item)
        if value.is_leaf and value.grad is not None:  # (a non-leaf's .grad is never set; reading it warns)
            made.grad = self.copy(value.grad, f"{name}.grad")
        self.pairs.append((name, value, made))
        return made

    def _optimizer(self, value: torch.optim.Optimizer, name: str) -> torch.optim.Optimizer:
        made = copy.copy(value)  # a new instance with the same attributes: its groups and state are replaced below
        made.param_groups = [
            {key: self.copy(item, f"{name}.param_groups[{g}][{key!r}]") for key, item in group.items()}
            for g, group in enumerate(value.param_groups)
        ]
        # its own type (torch's defaultdict(dict)), emptied, then filled with copies
        made.state = copy.copy(value.state)
        made.state.clear()
        index = {id(p): i for i, p in enumerate(p for group in value.param_groups for p in group["params"])}
        for param, state in value.state.items():
            where = index.get(id(param), f"x{len(index)}")
            made.state[self.copy(param, f"{name}.param[{where}]")] = self.copy(state, f"{name}.state[{where}]")
        self.optimizers.append((name, value, made))
        return made

    def changed(self) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        """The pairs whose real tensor or copy was written since it was copied (by the impl, or by the original)."""
        out = []
        for name, real, made in self.pairs:
            if real._version != self.versions[id(real)] or made._version != 0:
                out.append((name, real, made))
        return out


class ProgramState:
    """The program's tensors and objects a call can reach: protected while the original runs, then put back."""

    def __init__(self, roots: list[tuple[str, object]], packages: tuple[str, ...] = ()) -> None:
        self.storages: set[tuple[str, int]] = set()
        self.tensors: list[tuple[str, torch.Tensor, int]] = []  # (path, tensor, _version at snapshot)
        self._objects: list[tuple[object, dict[str, object]]] = []
        self._classes: list[tuple[type, dict[str, object]]] = []
        self._dicts: list[tuple[dict[Any, Any], dict[Any, Any]]] = []
        self._lists: list[tuple[list[Any], list[Any]]] = []
        self._seen: set[int] = set()
        self._packages = tuple(packages)
        self.truncated = False
        tracker = getattr(sys.modules.get("megatron.core.tensor_parallel.random"), "_CUDA_RNG_STATE_TRACKER", None)
        states = getattr(tracker, "states_", None)
        if isinstance(states, dict):
            self._seen.add(id(states))  # the RNG tracker's states are RngState's to restore
        # The call's own state first, then the globals of the packages named (their modules and classes).
        modules = [(f"module {n}", m, 0, True) for n, m in list(sys.modules.items()) if self._ours(n)]
        pending: list[tuple[str, object, int, bool]] = [
            *reversed(modules),
            *((n, v, 0, False) for n, v in reversed(roots)),
        ]
        while pending:
            if len(self._seen) >= MAX_OBJECTS:
                self.truncated = True
                break
            name, value, depth, global_ = pending.pop()
            if id(value) in self._seen or (_atomic(value) and not self._our_class(value)):
                continue
            if global_ and not self._global_state(value):
                continue  # reached from a module's globals: only containers, tensors and the packages' own objects
            self._seen.add(id(value))
            pending.extend((n, v, d, global_) for n, v, d in reversed(list(self._children(name, value, depth))))

    def _global_state(self, value: object) -> bool:
        if isinstance(value, torch.Tensor | dict | list | tuple | set | frozenset | types.ModuleType):
            return True
        return self._our_class(value) or self._ours(getattr(type(value), "__module__", "") or "")

    def _ours(self, module_name: str) -> bool:
        return any(module_name == p or module_name.startswith(p + ".") for p in self._packages)

    def _our_class(self, value: object) -> bool:
        return isinstance(value, type) and self._ours(getattr(value, "__module__", "") or "")

    def _children(self, name: str, value: object, depth: int) -> Iterator[tuple[str, object, int]]:
        if isinstance(value, type):  # a class of the packages named: its class attributes are global state
            attributes = {k: v for k, v in vars(value).items() if not k.startswith("__")}
            self._classes.append((value, attributes))
            for key, item in attributes.items():
                if not isinstance(item, types.ModuleType):
                    yield f"{name}.{key}", item, depth + 1
            return
        if isinstance(value, types.ModuleType):
            if depth or not self._ours(value.__name__):
                return  # a module is walked as a root of its own, or not at all
            self._dicts.append((vars(value), dict(vars(value))))
            for key, item in vars(value).items():
                if not key.startswith("__"):
                    yield f"{name}.{key}", item, 1
            return
        if isinstance(value, torch.Tensor):
            where = storage_key(value)
            if where is not None:
                self.storages.add(where)
            self.tensors.append((name, value, value._version))
            for attribute in _TENSOR_ATTRIBUTES if value.is_leaf else _TENSOR_ATTRIBUTES[1:]:
                item = getattr(value, attribute, None)
                if isinstance(item, torch.Tensor):
                    yield f"{name}.{attribute}", item, depth
            return
        if isinstance(value, dict):
            self._dicts.append((value, dict(value)))
            for key, item in value.items():
                yield f"{name}[{key!r}]", item, depth
                if isinstance(key, torch.Tensor):  # an optimizer's state is keyed by its parameters
                    yield f"{name}.key", key, depth
            return
        if isinstance(value, list):
            self._lists.append((value, list(value)))
            for index, item in enumerate(value):
                yield f"{name}[{index}]", item, depth
            return
        if isinstance(value, tuple | set | frozenset):
            for index, item in enumerate(value):
                yield f"{name}[{index}]", item, depth
            return
        found = getattr(value, "__dict__", None)
        if not isinstance(found, dict):
            return
        own: dict[str, Any] = found
        # Modules are walked whole (their tree is the state); other objects up to MAX_DEPTH hops.
        step = 0 if isinstance(value, torch.nn.Module) else 1
        if depth + step > MAX_DEPTH:
            return
        self._objects.append((value, dict(own)))
        for key, item in own.items():
            yield f"{name}.{key}", item, depth + step

    def put_back(self) -> list[str]:
        """Restore every object, dict and list reached to its snapshot; the names of the kinds that had changed."""
        changed: list[str] = []
        for obj, saved in self._objects:
            current = vars(obj)
            if not _same(current, saved):
                changed.append(f"{type(obj).__name__} attributes {sorted(_keys_changed(current, saved))[:3]}")
                current.clear()
                current.update(saved)
        for container, saved_items in self._dicts:
            if not _same(container, saved_items):
                changed.append(f"a dict's items {sorted(map(str, _keys_changed(container, saved_items)))[:3]}")
                container.clear()
                container.update(saved_items)
        for cls, saved_attributes in self._classes:
            current = {k: v for k, v in vars(cls).items() if not k.startswith("__")}
            if not _same(current, saved_attributes):
                keys = _keys_changed(current, saved_attributes)
                changed.append(f"class attributes {[f'{cls.__name__}.{k}' for k in sorted(keys)][:3]}")
                for key in keys:
                    if key in saved_attributes:
                        setattr(cls, key, saved_attributes[key])
                    else:
                        delattr(cls, key)
        for sequence, saved_list in self._lists:
            if len(sequence) != len(saved_list) or any(a is not b for a, b in zip(sequence, saved_list, strict=True)):
                changed.append("a list's elements")
                sequence[:] = saved_list
        return changed

    def written(self) -> list[str]:
        """Protected tensors whose version moved since the snapshot (a write the guard could not see)."""
        return [name for name, tensor, version in self.tensors if tensor._version != version]


def _same(current: dict[Any, Any], saved: dict[Any, Any]) -> bool:
    return len(current) == len(saved) and all(key in current and current[key] is value for key, value in saved.items())


def _keys_changed(current: dict[Any, Any], saved: dict[Any, Any]) -> set[Any]:
    keys = set(current) ^ set(saved)
    keys.update(key for key in set(current) & set(saved) if current[key] is not saved[key])
    return keys


class RngState:
    """The random-number state a compared call may draw from, saved now; ``restore`` puts it back."""

    def __init__(self, generators: tuple[torch.Generator, ...] = ()) -> None:
        self.cpu = torch.get_rng_state()
        self.device_module, self.device = _accelerator_rng()
        # Generators the call was given (``torch.rand(..., generator=g)``): shared with the original, not copied,
        # so each is put back like the default one. And Python's and numpy's global generators.
        self.generators = [(g, g.get_state()) for g in generators]
        self.python = pyrandom.getstate()
        numpy = sys.modules.get("numpy")
        self.numpy = (numpy, numpy.random.get_state()) if numpy is not None else None
        self.tracker: dict[str, Any] | None = None
        random = sys.modules.get("megatron.core.tensor_parallel.random")
        tracker = getattr(random, "_CUDA_RNG_STATE_TRACKER", None)
        found = getattr(tracker, "states_", None)  # its dict, restored in place (no new object for the walk to see)
        self._states: dict[str, Any] | None = found if isinstance(found, dict) else None
        if tracker is not None and hasattr(tracker, "get_states"):
            try:
                # A state is a tensor the tracker replaces (kept by reference) or, graph-safe, a
                # torch.Generator it advances in place (kept by its state).
                self.tracker = {
                    name: (state, state.get_state()) if isinstance(state, torch.Generator) else (state, None)
                    for name, state in tracker.get_states().items()
                }
            except Exception:  # noqa: BLE001  (megatron's own state: not readable here, not restored)
                self.tracker = None
        self._tracker = tracker

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        for generator, state in self.generators:
            generator.set_state(state)
        pyrandom.setstate(self.python)
        if self.numpy is not None:
            self.numpy[0].random.set_state(self.numpy[1])
        if self.device_module is not None and self.device is not None:
            self.device_module.set_rng_state_all(self.device)
        if self.tracker is not None and self._tracker is not None:
            for state, generator_state in self.tracker.values():
                if generator_state is not None:
                    state.set_state(generator_state)
            states = {name: state for name, (state, _) in self.tracker.items()}
            kept = self._states
            same = getattr(self._tracker, "states_", None) is kept
            if kept is not None and same:
                kept.clear()
                kept.update(states)
            else:
                self._tracker.set_states(states)


def _accelerator_rng() -> tuple[Any, Any]:
    """The accelerator's module (``torch.cuda``, ``torch.npu``, ...) and its generators' states, if one runs here."""
    try:
        accelerator = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    except Exception:  # noqa: BLE001  (no accelerator API, or none usable)
        accelerator = None
    if accelerator is None:
        return None, None
    module = torch.get_device_module(accelerator.type)
    initialized = getattr(module, "is_initialized", None)
    if callable(initialized) and not initialized():
        return None, None  # nothing drew from it yet: reading it would initialise the device
    try:
        return module, module.get_rng_state_all()
    except Exception:  # noqa: BLE001
        return None, None
