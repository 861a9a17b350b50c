"""The signature-compatibility rule of ``--check`` (fl_patch.core.signatures), against an oracle.

The oracle does what the rule summarises: it enumerates every call shape that is
valid for the target (how many positional arguments, which of the rest by keyword,
an unknown keyword for ``**kwargs``) and asks ``inspect.Signature.bind`` whether the
impl accepts it and binds each argument to a parameter of the same name. Hypothesis
generates the pairs of signatures.
"""

from __future__ import annotations

import inspect
import itertools

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fl_patch.core.signatures import compare_signatures

P = inspect.Parameter
NAMES = ("a", "b", "c", "d")
EXTRA_KEYWORD = "zz_extra"


def _calls(sig: inspect.Signature, receiver: bool):
    """(args, kwargs) of every call shape valid for ``sig``."""
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    var_pos = any(p.kind is P.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind is P.VAR_KEYWORD for p in params)
    max_pos = len(positional) + (2 if var_pos else 0)
    for count in range(1 if receiver else 0, max(max_pos, 1 if receiver else 0) + 1):
        args = tuple(f"pos{i}" for i in range(count))
        rest = [
            p
            for i, p in enumerate(positional)
            if i >= count and p.kind is P.POSITIONAL_OR_KEYWORD and not (receiver and i == 0)
        ]
        rest += [p for p in params if p.kind is P.KEYWORD_ONLY]
        required = [p for p in rest if p.default is P.empty]
        optional = [p for p in rest if p.default is not P.empty]
        for take in itertools.product((False, True), repeat=len(optional)):
            chosen = required + [p for p, t in zip(optional, take, strict=True) if t]
            for extra in (False, True) if var_kw else (False,):
                kwargs = {p.name: f"kw_{p.name}" for p in chosen}
                if extra:
                    kwargs[EXTRA_KEYWORD] = "kw_extra"
                try:
                    _function(sig)(*args, **kwargs)
                except TypeError:
                    continue
                yield args, kwargs


def _function(sig: inspect.Signature):
    """A real function with signature ``sig`` that returns where each argument landed.

    A real call, not ``Signature.bind``: on Python 3.11 ``bind`` rejects a keyword
    that shares its name with a positional-only parameter even when ``**kwargs``
    would take it, which a real call accepts.
    """
    namespace: dict[str, object] = {}
    exec(f"def f{sig}:\n    return dict(locals())", namespace)
    return namespace["f"]


def _where(sig: inspect.Signature, args, kwargs) -> dict[str, str]:
    """For each argument value, the parameter name it lands in (``*``/``**`` for varargs)."""
    bound = _function(sig)(*args, **kwargs)
    where = {}
    for name, value in bound.items():
        kind = sig.parameters[name].kind
        if kind is P.VAR_POSITIONAL:
            for v in value:
                where[v] = "*"
        elif kind is P.VAR_KEYWORD:
            for v in value.values():
                where[v] = "**"
        elif isinstance(value, str):  # an argument, not a default (defaults are ints)
            where[value] = name
    return where


def oracle_compatible(target: inspect.Signature, impl: inspect.Signature, receiver: bool) -> bool:
    """Every valid call of the target is valid for the impl, and each argument lands consistently.

    Consistently: a parameter callers can name lands in the impl's parameter of that
    name in every call, or in ``*args``/``**kwargs`` in every call (a forwarding impl);
    a positional-only one may land anywhere except in a slot callers can also name.
    """
    impl_named = {p.name for p in impl.parameters.values() if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
    keyword_names = _keyword_names(target, receiver)
    renames = _positional_renames(target, impl, receiver)
    reaching = {renames.get(name, name) for name in keyword_names}  # names the adapter hands the impl
    landings: dict[str, set[str]] = {}
    for args, kwargs in _calls(target, receiver):
        passed_on = {renames.get(k, k): v for k, v in kwargs.items()}
        if len(passed_on) < len(kwargs):
            return False  # two of the call's keywords would reach the impl under one name
        try:
            in_impl = _where(impl, args, passed_on)
        except TypeError:
            return False
        for value, t_name in _where(target, args, kwargs).items():
            if receiver and value == "pos0":
                continue  # self/cls: always passed, by position
            i_name = in_impl[value]
            if t_name in ("*", "**"):
                if i_name != t_name:
                    return False  # the target's extra arguments must stay extra
                continue
            if t_name in keyword_names:
                landings.setdefault(t_name, set()).add(i_name)
            elif i_name in impl_named and i_name in reaching:
                return False  # a positional-only argument in a slot that callers also name
    return all(found <= {renames.get(name, name)} or found <= {"*", "**"} for name, found in landings.items())


def _positional_renames(target: inspect.Signature, impl: inspect.Signature, receiver: bool) -> dict[str, str]:
    """What a caller naming the target's parameter at position i means: the impl's parameter at position i.

    (fl_patch passes keyword calls on under the impl's names where both take position i by name.)"""
    positional = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)
    t_pos = [p for p in target.parameters.values() if p.kind in positional]
    i_pos = [p for p in impl.parameters.values() if p.kind in positional]
    renames = {}
    for index, (theirs, ours) in enumerate(zip(t_pos, i_pos, strict=False)):
        if receiver and index == 0:
            continue
        if theirs.kind is ours.kind is P.POSITIONAL_OR_KEYWORD and theirs.name != ours.name:
            renames[theirs.name] = ours.name
    return renames


def _keyword_names(sig: inspect.Signature, receiver: bool) -> set[str]:
    names = set()
    for i, p in enumerate(sig.parameters.values()):
        if p.kind is P.KEYWORD_ONLY or (p.kind is P.POSITIONAL_OR_KEYWORD and not (receiver and i == 0)):
            names.add(p.name)
    return names


@st.composite
def signatures(draw) -> inspect.Signature:
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4))
    kinds = sorted(
        draw(
            st.lists(
                st.sampled_from([P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY]),
                min_size=len(names),
                max_size=len(names),
            )
        )
    )
    params = []
    seen_default = False
    for name, kind in zip(names, kinds, strict=True):
        if kind is P.KEYWORD_ONLY:
            default = draw(st.sampled_from([P.empty, 1, 2]))
        else:
            # a positional parameter without a default cannot follow one with a default
            default = draw(st.sampled_from([1, 2])) if seen_default else draw(st.sampled_from([P.empty, 1, 2]))
            seen_default = seen_default or default is not P.empty
        params.append(P(name, kind, default=default))
    if draw(st.booleans()):
        index = sum(1 for p in params if p.kind is not P.KEYWORD_ONLY)
        params.insert(index, P("args", P.VAR_POSITIONAL))
    if draw(st.booleans()):
        params.append(P("kwargs", P.VAR_KEYWORD))
    return inspect.Signature(params)


@settings(max_examples=600, deadline=None)
@given(signatures(), signatures(), st.booleans())
def test_rule_agrees_with_the_oracle(target, impl, receiver) -> None:
    if receiver:  # a method's target takes its receiver by position
        assume(any(p.kind is not P.KEYWORD_ONLY and p.kind is not P.VAR_KEYWORD for p in target.parameters.values()))
    findings = compare_signatures(target, impl, receiver=receiver)
    errors = [f.message for f in findings if f.level == "error"]
    assert (not errors) == oracle_compatible(target, impl, receiver), (str(target), str(impl), receiver, errors)
