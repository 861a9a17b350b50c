"""Identity and kinds of targets (docs/reliability.md): generated cases, then real megatron-core.

Each generated case writes a small module (a target of one kind) and an impl module (an impl
of one kind), activates fl_patch one of three ways (the hook patches the module as it
imports; the module was imported before ``install()``; the registration comes after both),
and checks the promise of that kind: ``isinstance``/``issubclass`` against the name keep
holding for everything they held for; a wrapper's API survives; a wrong-kind impl is
refused with one message that ``--check``'s comparison (``fl_patch.core.kinds.fits``) gives too.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import itertools
import pickle
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fl_patch
from fl_patch import Status
from fl_patch.core import kinds as _kinds
from fl_patch.core.resolve import resolve_in

from ..conftest import clean_env, runs

_COUNTER = itertools.count()
ACTIVATIONS = ("hook", "imported_before_install", "registered_after_install")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("kinds")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))


def _write(root: Path, name: str, source: str) -> None:
    (root / f"{name}.py").write_text(textwrap.dedent(source))
    importlib.invalidate_caches()


def _activate(way: str, target: str, impl: str, module: str) -> None:
    if way == "hook":
        fl_patch.register(target, impl)
        fl_patch.install()
        importlib.import_module(module)
    elif way == "imported_before_install":
        importlib.import_module(module)
        fl_patch.register(target, impl)
        fl_patch.install()
    else:
        fl_patch.install()
        importlib.import_module(module)
        fl_patch.register(target, impl)


def _record(target: str) -> fl_patch.PatchRecord:
    (record,) = [r for r in fl_patch.report() if r.target == target]
    return record


# ---------------------------------------------------------------------------------- classes
CLASS_BASES = {
    "plain": ("", "object"),
    "dataclass": ("@dataclasses.dataclass\n", "object"),
    "abc": ("", "abc.ABC"),
    "metaclass": ("", "metaclass=Meta"),
    "slots": ("", "object"),
}
IMPL_CLASSES = {
    "subclass": "class Impl(target.Original):\n    def greet(self):\n        return 'impl'\n",
    "dataclass_subclass": (
        "@dataclasses.dataclass\nclass Impl(target.Original):\n    extra: int = 5\n"
        "    def greet(self):\n        return 'impl'\n"
    ),
    "slots_subclass": "class Impl(target.Original):\n    __slots__ = ()\n    def greet(self):\n        return 'impl'\n",
}


def _class_module(kind: str) -> str:
    decorator, base = CLASS_BASES[kind]
    body = "    x: int = 1\n" if kind == "dataclass" else "    def __init__(self, x=1):\n        self.x = x\n"
    slots = "    __slots__ = ('x', '__dict__')\n" if kind == "slots" else ""
    return (
        "import abc, dataclasses\n"
        "class Meta(type):\n    pass\n"
        f"{decorator}class Original({base}):\n{slots}{body}"
        "    def greet(self):\n        return 'upstream'\n"
        "class Before(Original):\n    pass\n"
        "MADE_BEFORE = Original()\n"
        "class Virtual:\n    pass\n"
        "if isinstance(Original, abc.ABCMeta):\n    Original.register(Virtual)\n"
        "def accepts(obj):\n    return isinstance(obj, Original)\n"
        "def accepts_class(cls):\n    return issubclass(cls, Original)\n"
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(CLASS_BASES)), st.sampled_from(sorted(IMPL_CLASSES)), st.sampled_from(ACTIVATIONS))
def test_replaced_class_keeps_every_isinstance_and_issubclass(engine, sandbox, target_kind, impl_kind, way) -> None:
    if impl_kind == "dataclass_subclass" and target_kind != "dataclass":
        impl_kind = "subclass"  # (a dataclass impl of a non-dataclass needs its own __init__ fields)
    n = next(_COUNTER)
    module, impl_module = f"fltk_cls_{n}", f"fltk_cls_impl_{n}"
    _write(sandbox, module, _class_module(target_kind))
    _write(sandbox, impl_module, f"import dataclasses\nimport {module} as target\n" + IMPL_CLASSES[impl_kind])
    _activate(way, f"{module}.Original", f"{impl_module}.Impl", module)
    mod = sys.modules[module]
    impl = sys.modules[impl_module].Impl
    original = fl_patch.original(f"{module}.Original")
    assert _record(f"{module}.Original").status is Status.APPLIED, _record(f"{module}.Original").detail
    # The name keeps the upstream class (core/classes.py); what it builds is the impl.
    name = mod.Original
    assert name is original and runs(name, impl)

    # Everything the check accepted before the patch, it accepts now.
    for obj in (mod.MADE_BEFORE, mod.Before(), impl(), name()):
        assert mod.accepts(obj) and isinstance(obj, name), obj
    assert mod.accepts_class(mod.Before) and mod.accepts_class(original) and mod.accepts_class(impl)
    if target_kind == "abc":
        assert mod.accepts(mod.Virtual()) and mod.accepts_class(mod.Virtual)
    # ... and nothing else.
    assert not mod.accepts(object()) and not mod.accepts_class(int)
    if target_kind != "abc":  # (ABCMeta asks its subclasses, the impl among them)
        assert not issubclass(mod.Before, impl)

    # The name builds the impl; a subclass (made before, or later) builds itself.
    made = name()
    assert type(made) is impl and made.greet() == "impl" and isinstance(made, original)
    assert type(mod.Before()) is mod.Before and mod.Before().greet() == "upstream"
    assert type(pickle.loads(pickle.dumps(made))) is impl and pickle.loads(pickle.dumps(name)) is name
    later = type("Later", (name,), {})
    assert mod.accepts_class(later) and type(later()) is later and not isinstance(mod.MADE_BEFORE, later)

    fl_patch.uninstall()
    assert mod.Original is original and mod.accepts(made) and type(original()) is original
    assert original().greet() == "upstream"


def test_class_impl_whose_subclass_cannot_be_made_is_applied_where_the_name_keeps_the_class(engine, sandbox) -> None:
    """The redirect makes no subclass, so an impl that refuses subclasses (``__init_subclass__`` needing an
    argument) is applied at the class's own definition; at a re-exported name, where fl_patch must put a
    stand-in subclass, it is refused with one message naming the cause."""
    n = next(_COUNTER)
    module, impl_module, reexport = f"fltk_cls_{n}", f"fltk_cls_impl_{n}", f"fltk_cls_reexport_{n}"
    _write(sandbox, module, _class_module("plain"))
    _write(sandbox, reexport, f"from {module} import Original\n")
    _write(
        sandbox,
        impl_module,
        f"import {module} as target\n"
        "class Impl(target.Original):\n"
        "    def __init_subclass__(cls, *, flavour):\n"  # a subclass must name a flavour
        "        super().__init_subclass__()\n"
        "    def greet(self):\n        return 'impl'\n",
    )
    _activate("hook", f"{module}.Original", f"{impl_module}.Impl", module)
    assert _record(f"{module}.Original").status is Status.APPLIED
    assert sys.modules[module].Original().greet() == "impl"
    fl_patch.uninstall()
    engine.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _activate("hook", f"{reexport}.Original", f"{impl_module}.Impl", reexport)
    messages = [str(w.message) for w in caught if issubclass(w.category, fl_patch.FlPatchWarning)]
    assert len(messages) == 1 and "cannot build the class that keeps isinstance" in messages[0], messages
    assert "flavour" in messages[0] and "upstream code runs instead" in messages[0]
    assert _record(f"{reexport}.Original").status is Status.IMPL_FAILED
    assert sys.modules[reexport].Original is fl_patch.original(f"{reexport}.Original")


# ---------------------------------------------------------------------------------- wrappers
WRAPPED_TARGETS = {
    "lru_cache_function": ("@functools.lru_cache(maxsize=7)\ndef work(x):\n    return ('upstream', x)\n", "work"),
    "lru_cache_method": (
        "class Holder:\n    @functools.lru_cache(maxsize=7, typed=True)\n"
        "    def work(self, x):\n        return ('upstream', x)\n",
        "Holder.work",
    ),
    "cached_property": (
        "class Holder:\n    @functools.cached_property\n    def work(self):\n        return ('upstream', 0)\n",
        "Holder.work",
    ),
    "property": ("class Holder:\n    @property\n    def work(self):\n        return ('upstream', 0)\n", "Holder.work"),
    "singledispatch": (
        "@functools.singledispatch\ndef work(x):\n    return ('upstream', x)\n"
        "@work.register\ndef _(x: int):\n    return ('upstream int', x)\n",
        "work",
    ),
    "singledispatchmethod": (
        "class Holder:\n    @functools.singledispatchmethod\n    def work(self, x):\n        return ('upstream', x)\n",
        "Holder.work",
    ),
}
# Impl sources by kind; {recv} is "self, " for class members.
WRAPPED_IMPLS = {
    "plain": "def impl({recv}x=0):\n    return ('impl', x)\n",
    "lru_cache": "@functools.lru_cache(maxsize=3)\ndef impl({recv}x=0):\n    return ('impl', x)\n",
    "cached_property": "@functools.cached_property\ndef impl({recv}):\n    return ('impl', 0)\n",
    "singledispatch": "@functools.singledispatch\ndef impl(x):\n    return ('impl', x)\n",
    "singledispatchmethod": (
        "class _Box:\n    @functools.singledispatchmethod\n    def impl(self, x):\n        return ('impl', x)\n"
        "impl = _Box.__dict__['impl']\n"
    ),
}
# Which impl kinds keep each target's wrapper kind: a callable the target's wrapping can wrap
# (whose signature takes the target's calls), or one already of that kind. What no wrapping
# keeps the meaning of (which overloads of a singledispatch would still run?) takes its kind only.
KEEPS = {
    "lru_cache_function": {"plain", "lru_cache", "singledispatch"},
    "lru_cache_method": {"plain", "lru_cache"},  # (the singledispatch impl takes no self)
    "cached_property": {"plain", "cached_property", "lru_cache", "singledispatch"},
    "property": {"plain", "lru_cache", "singledispatch"},
    "singledispatch": {"singledispatch"},
    "singledispatchmethod": {"singledispatchmethod"},
}


def _call(mod: object, target_kind: str) -> object:
    if target_kind.endswith("function") or target_kind == "singledispatch":
        return mod.work(2)  # type: ignore[attr-defined]
    holder = mod.Holder()  # type: ignore[attr-defined]
    return holder.work if target_kind in ("cached_property", "property") else holder.work(2)


def _api_works(mod: object, target_kind: str) -> None:
    if target_kind.startswith("lru_cache"):
        work = mod.work if target_kind.endswith("function") else mod.Holder.work  # type: ignore[attr-defined]
        work.cache_clear()
        assert work.cache_info().currsize == 0
        assert work.cache_parameters()["maxsize"] in (7, 3)
    elif target_kind == "singledispatch":

        @mod.work.register  # type: ignore[attr-defined]
        def _(x: str) -> tuple[str, str]:
            return ("registered later", x)

        assert mod.work("s") == ("registered later", "s")  # type: ignore[attr-defined]
    elif target_kind == "singledispatchmethod":
        assert callable(mod.Holder.__dict__["work"].register)  # type: ignore[attr-defined]
    elif target_kind == "cached_property":
        holder = mod.Holder()  # type: ignore[attr-defined]
        first = holder.work
        assert holder.work is first and "work" in vars(holder)  # cached on the instance


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(WRAPPED_TARGETS)), st.sampled_from(sorted(WRAPPED_IMPLS)), st.sampled_from(ACTIVATIONS))
def test_wrapper_kind_and_api_are_kept_or_the_registration_is_refused(
    engine, sandbox, target_kind, impl_kind, way
) -> None:
    n = next(_COUNTER)
    module, impl_module = f"fltk_wrap_{n}", f"fltk_wrap_impl_{n}"
    source, attr = WRAPPED_TARGETS[target_kind]
    _write(sandbox, module, "import functools\n" + source)
    in_class = "." in attr
    recv = "self, " if in_class else ""
    impl_source = WRAPPED_IMPLS[impl_kind].format(recv=recv)
    if impl_kind == "cached_property" or (impl_kind == "plain" and target_kind in ("cached_property", "property")):
        impl_source = impl_source.replace("self, x=0", "self").replace("('impl', x)", "('impl', 0)")
    _write(sandbox, impl_module, "import functools\n" + impl_source)
    target = f"{module}.{attr}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _activate(way, target, f"{impl_module}.impl", module)
    mod = sys.modules[module]
    problems = [str(w.message) for w in caught if issubclass(w.category, fl_patch.FlPatchWarning)]
    record = _record(target)
    # What --check says is what the engine did: the same function decides (_kinds.fits).
    fl_patch.uninstall()
    resolved = resolve_in(mod, tuple(attr.split(".")))
    findings = _kinds.fits(resolved, importlib.import_module(impl_module).impl) or []
    errors = [f.message for f in findings if f.level == "error"]
    fl_patch.install()
    if impl_kind in KEEPS[target_kind]:
        assert record.status is Status.APPLIED and problems == [] and errors == [], (record.detail, problems, errors)
        result = _call(mod, target_kind)
        assert result[0] == "impl", result
        _api_works(mod, target_kind)
    else:
        assert record.status is Status.IMPL_FAILED and len(problems) == 1, (record.detail, problems)
        assert errors and errors[0] in problems[0]  # --check names the same cause
        assert _call(mod, target_kind)[0].startswith("upstream")  # upstream runs, said once


def test_wrapping_never_touches_the_impl(engine, sandbox) -> None:
    n = next(_COUNTER)
    module = f"fltk_wrap_{n}"
    _write(sandbox, module, "import functools\n" + WRAPPED_TARGETS["cached_property"][0])

    @functools.cached_property
    def shared(self: object) -> tuple[str, int]:
        return ("impl", 0)

    fl_patch.register(f"{module}.Holder.work", shared)
    fl_patch.install()
    mod = importlib.import_module(module)
    assert mod.Holder().work == ("impl", 0)
    assert shared.attrname is None and mod.Holder.__dict__["work"] is not shared  # a fresh one was named


# ---------------------------------------------------------------------------------- wrong kinds
MEMBER_TARGETS = {
    "method": "    def work(self, x):\n        return ('upstream', x)\n",
    "staticmethod": "    @staticmethod\n    def work(x):\n        return ('upstream', x)\n",
    "classmethod": "    @classmethod\n    def work(cls, x):\n        return ('upstream', x)\n",
}
MEMBER_IMPLS = {
    "function_receiver": "def impl(self, x):\n    return ('impl', x)\n",
    "function_plain": "def impl(x):\n    return ('impl', x)\n",
    "staticmethod": "@staticmethod\ndef impl(x):\n    return ('impl', x)\n",
    "classmethod": "@classmethod\ndef impl(cls, x):\n    return ('impl', x)\n",
    "property": "@property\ndef impl(self):\n    return ('impl', 0)\n",
    "class": "class impl(tuple):\n    def __new__(cls, x):\n        return tuple.__new__(cls, ('impl', x))\n",
    "incompatible": "def impl(self, x, y):\n    return ('impl', x)\n",
    "keyword_renamed": "def impl(self, value):\n    return ('impl', value)\n",
}
# (target kind, impl kind) pairs that can stand in; every other pair is refused.
FITS = {
    ("method", "function_receiver"),
    ("staticmethod", "function_plain"),
    ("staticmethod", "staticmethod"),
    ("staticmethod", "class"),  # (stored as a staticmethod, a class is called like a function)
    ("classmethod", "function_receiver"),
    ("classmethod", "classmethod"),
    # Another name for the same parameter: applied, keyword calls passed on (docs/reliability.md).
    ("method", "keyword_renamed"),
    ("classmethod", "keyword_renamed"),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(MEMBER_TARGETS)), st.sampled_from(sorted(MEMBER_IMPLS)), st.sampled_from(ACTIVATIONS))
def test_wrong_kind_or_signature_is_refused_once_and_check_agrees(engine, sandbox, target_kind, impl_kind, way) -> None:
    n = next(_COUNTER)
    module, impl_module = f"fltk_member_{n}", f"fltk_member_impl_{n}"
    _write(sandbox, module, "class Holder:\n" + MEMBER_TARGETS[target_kind])
    _write(sandbox, impl_module, MEMBER_IMPLS[impl_kind])
    target = f"{module}.Holder.work"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _activate(way, target, f"{impl_module}.impl", module)
    mod = sys.modules[module]
    problems = [str(w.message) for w in caught if issubclass(w.category, fl_patch.FlPatchWarning)]
    record = _record(target)
    fl_patch.uninstall()
    findings = _kinds.fits(resolve_in(mod, ("Holder", "work")), importlib.import_module(impl_module).impl) or []
    errors = [f.message for f in findings if f.level == "error"]
    fl_patch.install()
    if (target_kind, impl_kind) in FITS:
        assert record.status is Status.APPLIED and problems == [] and errors == [], (record.detail, problems)
        by_class = mod.Holder.work(mod.Holder(), 3) if target_kind == "method" else mod.Holder.work(3)
        assert mod.Holder().work(3) == ("impl", 3) and tuple(by_class) == ("impl", 3)
        if impl_kind != "class":  # a call naming the target's parameter reaches the impl, renamed or not
            assert tuple(mod.Holder().work(x=3)) == ("impl", 3)
        assert ("renamed" in record.detail) == (impl_kind == "keyword_renamed"), record.detail
    else:
        assert record.status is Status.IMPL_FAILED and len(problems) == 1, (record.detail, problems)
        assert errors and all(e in problems[0] for e in errors), (errors, problems)
        assert mod.Holder().work(3) == ("upstream", 3)


def test_strict_signature_mismatch_is_an_error_at_start(run_python, sandbox) -> None:
    _write(sandbox, "fltk_strict_target", "def work(x, *, scale=1):\n    return x * scale\n")
    _write(sandbox, "fltk_strict_impl", "def work(x):\n    return x\n")
    code = (
        "import fl_patch\n"
        "fl_patch.register('fltk_strict_target.work', 'fltk_strict_impl.work')\n"
        "fl_patch.install()\n"
        "import fltk_strict_target\n"
        "print('reached the program')\n"
    )
    env = clean_env(FL_PATCH_STRICT="1", FL_PATCH_PACKS="none")
    env["PYTHONPATH"] = f"{sandbox}:{env['PYTHONPATH']}"
    proc = run_python("-c", code, env=env, check=False)
    assert proc.returncode != 0 and "reached the program" not in proc.stdout
    assert "the target takes keyword 'scale'; the impl does not" in proc.stderr, proc.stderr[-2000:]


# ---------------------------------------------------------------------------------- real megatron-core
def test_replacing_transformer_config_keeps_mla_models_working(megatron_core, engine) -> None:
    """FlagScale's Ascend tree replaces TransformerConfig; MLATransformerConfig subclasses the original."""
    import fltest_plugin.kinds as kinds
    from megatron.core.transformer import module as megatron_module
    from megatron.core.transformer import transformer_config

    original = transformer_config.TransformerConfig
    target = "megatron.core.transformer.transformer_config.TransformerConfig"
    fl_patch.register(target, "fltest_plugin.kinds.VendorTransformerConfig")
    fl_patch.install()
    assert _record(target).status is Status.APPLIED
    name = transformer_config.TransformerConfig
    assert megatron_module.TransformerConfig is name  # the name megatron's assert reads
    mla = transformer_config.MLATransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4)
    # GraphableMegatronModule.__init__: assert isinstance(config, TransformerConfig)
    megatron_module.GraphableMegatronModule(mla)
    assert isinstance(mla, name) and issubclass(transformer_config.MLATransformerConfig, name)
    from megatron.core.transformer.heterogeneous.heterogeneous_config import HeterogeneousTransformerConfig

    assert issubclass(HeterogeneousTransformerConfig, name)
    made = name(num_layers=1, hidden_size=64, num_attention_heads=4)
    assert made.vendor_flag and isinstance(made, kinds.VendorTransformerConfig) and isinstance(made, original)
    megatron_module.GraphableMegatronModule(made)
    fl_patch.uninstall()
    assert transformer_config.TransformerConfig is original and megatron_module.TransformerConfig is original


def test_lru_cached_yarn_forward_keeps_cache_clear(megatron_core, engine) -> None:
    """YarnRotaryEmbedding.__init__ calls self.forward.cache_clear(); a plain impl gets lru_cache's API."""
    import fltest_plugin.kinds as kinds
    from megatron.core.models.common.embeddings import yarn_rotary_pos_embedding as yarn

    kinds.CALLS.clear()
    upstream = vars(yarn.YarnRotaryEmbedding)["forward"]
    fl_patch.register(kinds.YARN_FORWARD, "fltest_plugin.kinds.yarn_forward")
    fl_patch.install()
    assert _record(kinds.YARN_FORWARD).status is Status.APPLIED
    installed = vars(yarn.YarnRotaryEmbedding)["forward"]
    assert installed.cache_parameters() == upstream.cache_parameters()  # maxsize=32, typed=False
    rope = yarn.YarnRotaryEmbedding(kv_channels=16, use_cpu_initialization=True)  # cache_clear() inside
    kinds.CALLS.clear()
    first = rope.forward(8)
    assert rope.forward(8) is first and kinds.CALLS == ["yarn_forward"]  # cached, as upstream's
    rope.forward.cache_clear()
    assert rope.forward.cache_info().currsize == 0
    assert kinds.yarn_forward.__dict__.get("__wrapped__") is None  # the impl itself is not touched
    assert rope.cos_cached.shape[0] == rope.original_max_position_embeddings  # built by the impl
    fl_patch.uninstall()
    assert vars(yarn.YarnRotaryEmbedding)["forward"] is upstream


def test_cpu_pack_device_of_stays_a_device(engine) -> None:
    """The CUDA-on-CPU transfer replaces torch.cuda.device; torch.cuda.device_of subclasses the original."""
    import torch

    from fl_patch.impls.cuda_on_cpu import transfer as cuda_on_cpu

    original = torch.cuda.device
    fl_patch.register("torch.cuda.device", "fl_patch.impls.cuda_on_cpu.transfer.Device")
    fl_patch.install()
    assert _record("torch.cuda.device").status is Status.APPLIED
    assert issubclass(torch.cuda.device_of, torch.cuda.device)
    assert isinstance(torch.cuda.device_of(torch.zeros(1)), torch.cuda.device)
    with torch.cuda.device(0) as entered:  # the CPU pack's behaviour: entering changes nothing
        assert entered is None
    assert isinstance(torch.cuda.device(0), cuda_on_cpu.Device)
    fl_patch.uninstall()
    assert torch.cuda.device is original


# ---------------------------------------------------------------------------------- TorchScript
@pytest.mark.parametrize("way", ["hook", "registered_after_install"])
def test_torchscript_compiled_before_the_patch_is_reported(engine, sandbox, way) -> None:
    """torch.jit.script compiled ``caller`` (and ``helper`` with it) at import: it keeps the original."""
    n = next(_COUNTER)
    module, impl_module = f"fltk_ts_{n}", f"fltk_ts_impl_{n}"
    _write(
        sandbox,
        module,
        "import torch\ndef helper(x):\n    return x + 1\n"
        "@torch.jit.script\ndef caller(x):\n    return helper(x) * 2\n"
        "def plain(x):\n    return x + 1\n",
    )
    _write(sandbox, impl_module, "def helper(x):\n    return x + 100\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _activate(way, f"{module}.helper", f"{impl_module}.helper", module)
        fl_patch.register(f"{module}.plain", f"{impl_module}.helper")  # compiled by no one: no finding
    problems = [str(w.message) for w in caught if issubclass(w.category, fl_patch.FlPatchWarning)]
    record = _record(f"{module}.helper")
    assert record.status is Status.APPLIED and f"{module}.caller" in record.detail, record.detail
    assert len(problems) == 1 and f"keeps calling the original: {module}.caller" in problems[0], problems
    assert (
        _record(f"{module}.plain").status is Status.APPLIED and "TorchScript" not in _record(f"{module}.plain").detail
    )


# ---------------------------------------------------------------------------------- never mutate
def test_one_impl_for_two_targets_gives_each_its_own_wrapped(engine, sandbox) -> None:
    """The CPU pack registers reset_memory_stats for two torch.cuda.memory functions."""
    n = next(_COUNTER)
    module, impl_module = f"fltk_shared_{n}", f"fltk_shared_impl_{n}"
    _write(sandbox, module, "def first(x=None):\n    return 'first'\ndef second(x=None):\n    return 'second'\n")
    _write(sandbox, impl_module, "def impl(x=None):\n    return 'impl'\n")
    mod = importlib.import_module(module)
    first, second = mod.first, mod.second
    fl_patch.register(f"{module}.first", f"{impl_module}.impl")
    fl_patch.register(f"{module}.second", f"{impl_module}.impl")
    fl_patch.install()
    assert mod.first() == mod.second() == "impl"
    assert mod.first.__wrapped__ is first and mod.second.__wrapped__ is second  # each its own original
    assert mod.first is not mod.second and mod.second.__code__ is mod.first.__code__  # the same code
    assert pickle.loads(pickle.dumps(mod.second)) is mod.second
    assert fl_patch.original(f"{module}.second") is second
    fl_patch.uninstall()
    assert mod.first is first and mod.second is second
    assert "__wrapped__" not in vars(importlib.import_module(impl_module).impl)


# ------------------------------------------------ objects fl_patch does not own (issue 24)
@pytest.fixture
def _report_mode(monkeypatch: pytest.MonkeyPatch):
    """``_report_mode(True)``: the next install() runs in --report mode (the exit report itself muted)."""
    from fl_patch.reporting import exit_report

    monkeypatch.setattr(exit_report, "_report_at_exit", lambda: None)

    def set_mode(on: bool) -> None:  # (per hypothesis example: the fixture is set up once for all)
        if on:
            monkeypatch.setenv("FL_PATCH_REPORT", "1")
        else:
            monkeypatch.delenv("FL_PATCH_REPORT", raising=False)

    return set_mode


# Library functions used directly as impls: fl_patch must install its own copy and never
# write on the library's function. (module, name, a call's argument)
LIBRARY_IMPLS = {
    "stdlib": ("textwrap", "dedent", "text", "  x\n  y\n"),
    "stdlib_json": ("json", "dumps", "obj", [1, 2]),
    "torch": ("torch.nn.functional", "silu", "input", None),  # the argument: a tensor, made here
}


@given(
    library=st.sampled_from(sorted(LIBRARY_IMPLS)),
    report_mode=st.booleans(),
    way=st.sampled_from(ACTIVATIONS),
)
@settings(max_examples=18, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_library_function_used_as_impl_is_never_written_on(
    engine, sandbox, _report_mode, library, report_mode, way
) -> None:
    import torch

    module_name, function_name, parameter, argument = LIBRARY_IMPLS[library]
    library_function = getattr(importlib.import_module(module_name), function_name)
    before = dict(vars(library_function))
    n = next(_COUNTER)
    module = f"fltk_library_{n}"
    _write(sandbox, module, f"def act({parameter}):\n    return ('upstream', {parameter})\n")
    _report_mode(report_mode)
    _activate(way, f"{module}.act", f"{module_name}.{function_name}", module)
    mod = sys.modules[module]
    argument = torch.tensor([-1.0, 0.0, 2.0]) if argument is None else argument
    expected = library_function(argument)
    got = mod.act(argument)
    assert (got == expected).all() if isinstance(expected, torch.Tensor) else got == expected
    # The library's function is untouched: no __wrapped__, no __signature__, unwrap is itself.
    assert dict(vars(library_function)) == before
    assert inspect.unwrap(library_function) is library_function
    # What fl_patch installed is its own object and names the original, as for any impl.
    assert mod.act is not library_function
    assert mod.act.__wrapped__.__module__ == module and mod.act.__wrapped__.__qualname__ == "act"
    assert pickle.loads(pickle.dumps(mod.act)) is mod.act  # named where it is installed, counted or not
    fl_patch.uninstall()
    assert dict(vars(library_function)) == before


@pytest.mark.parametrize("report_mode", [False, True], ids=["default", "report"])
def test_an_impl_calling_upstream_through_the_targets_wrapped_works_the_same_under_report(
    engine, sandbox, _report_mode, report_mode
) -> None:
    """A diagnostic mode never changes behaviour: FlagScale's way to the original (the target's
    ``__wrapped__``) is upstream's under --report too, and the impl itself is never written on."""
    n = next(_COUNTER)
    module, impl_module = f"fltk_selfref_{n}", f"fltk_selfref_impl_{n}"
    _write(sandbox, module, "def act(x):\n    return x + 1\n")
    _write(sandbox, impl_module, f"import {module} as target\ndef act(x):\n    return 10 * target.act.__wrapped__(x)\n")
    _report_mode(report_mode)
    fl_patch.register(f"{module}.act", f"{impl_module}.act")
    fl_patch.install()
    mod = importlib.import_module(module)
    assert mod.act(1) == 20
    impl = importlib.import_module(impl_module).act
    assert mod.act.__wrapped__ is fl_patch.original(f"{module}.act")
    assert (mod.act.__code__ is impl.__code__) is not report_mode  # under --report: the counting wrapper's
    assert "__wrapped__" not in vars(impl) and "__signature__" not in vars(impl)
    fl_patch.uninstall()
    assert "__wrapped__" not in vars(impl) and "__signature__" not in vars(impl)
