"""Can an impl stand in for its target? A comparison of call signatures.

The question is the caller's: every call that is valid for the target must be
valid for the impl, and must mean the same thing there. Concretely, for each
parameter of the target:

- passed by position ``i``: the impl accepts position ``i`` (a parameter there, or
  ``*args``), and it is not positional-only in the impl when callers may name it. Where
  the impl calls that parameter by another name (``def divide(a, b)`` for
  ``divide(numerator, denominator)``), a caller naming it means position ``i`` all the
  same: that is a *rename*, not an error. ``compare`` returns the renames; the engine
  then installs a small adapter that passes keyword calls on under the impl's names (only
  for such impls: the common case costs nothing), and ``--check`` says so;
- passed by keyword: the impl has a parameter of that name that takes keywords, or
  ``**kwargs`` (and then it has no *positional* parameter of that name either);
- optional in the target: optional in the impl (callers leave it out). A different
  default is a warning: callers that leave it out get another behaviour;
- the target's ``*args`` / ``**kwargs``: the impl has them too, and no extra named
  positional parameter that would swallow the target's extra positional arguments;
- the impl's own extra parameters are optional (no caller passes them).

For methods the receiver (``self``, ``cls``) is compared by position only, its
name does not matter. Annotations are not compared: Python does not enforce them.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Comparison", "Finding", "compare", "compare_signatures"]

_P = inspect.Parameter
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)
_KEYWORDABLE = (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)


@dataclass(frozen=True)
class Finding:
    level: str  # "error": calls would break; "warning": behaviour may differ; "note": adapted (a rename)
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"level": self.level, "message": self.message}


def _same_default(a: object, b: object) -> bool:
    if a is b:
        return True
    try:
        equal = type(a) is type(b) and a == b
        if isinstance(equal, bool):
            return equal
    except Exception:  # noqa: BLE001  (a default whose == raises or is ambiguous: compare reprs)
        pass
    return type(a) is type(b) and repr(a) == repr(b)


@dataclass(frozen=True)
class Comparison:
    findings: list[Finding]
    renames: dict[str, str]  # target's parameter name -> the impl's, for keyword calls (position kept)


def compare_signatures(target: inspect.Signature, impl: inspect.Signature, *, receiver: bool = False) -> list[Finding]:
    """``compare(...).findings``."""
    return compare(target, impl, receiver=receiver).findings


def compare(target: inspect.Signature, impl: inspect.Signature, *, receiver: bool = False) -> Comparison:
    """Why ``impl`` cannot stand in for ``target`` (errors), may behave differently (warnings), and the renames.

    ``receiver=True``: both are functions stored on a class whose first parameter is
    the instance or class; it is matched by position, not by name.
    """
    errors: list[str] = []
    notes: list[str] = []
    renames: dict[str, str] = {}
    warnings: list[str] = []
    t_params = list(target.parameters.values())
    i_params = list(impl.parameters.values())
    t_pos = [p for p in t_params if p.kind in _POSITIONAL]
    i_pos = [p for p in i_params if p.kind in _POSITIONAL]
    t_var_pos = next((p for p in t_params if p.kind is _P.VAR_POSITIONAL), None)
    i_var_pos = next((p for p in i_params if p.kind is _P.VAR_POSITIONAL), None)
    t_var_kw = next((p for p in t_params if p.kind is _P.VAR_KEYWORD), None)
    i_var_kw = next((p for p in i_params if p.kind is _P.VAR_KEYWORD), None)
    i_by_keyword = {p.name: p for p in i_params if p.kind in _KEYWORDABLE}
    t_keyword_names = {
        p.name for index, p in enumerate(t_pos) if p.kind is _P.POSITIONAL_OR_KEYWORD and not (receiver and index == 0)
    } | {p.name for p in t_params if p.kind is _P.KEYWORD_ONLY}

    # A caller naming the target's parameter at position i means position i: where the impl takes that
    # position by another name, the keyword is passed on under the impl's name (a rename, not an error).
    for index, (param, counterpart) in enumerate(zip(t_pos, i_pos, strict=False)):
        if receiver and index == 0:
            continue
        if param.kind is counterpart.kind is _P.POSITIONAL_OR_KEYWORD and counterpart.name != param.name:
            renames[param.name] = counterpart.name
    # The keyword names that reach the impl: the target's, each under the impl's name where renamed.
    reaching = {renames.get(name, name) for name in t_keyword_names}

    for index, param in enumerate(t_pos):
        is_receiver = receiver and index == 0
        name = "the receiver (self/cls)" if is_receiver else repr(param.name)
        by_keyword = param.kind is _P.POSITIONAL_OR_KEYWORD and not is_receiver
        optional = param.default is not _P.empty and not is_receiver  # the receiver is always passed
        other = i_pos[index] if index < len(i_pos) else None
        if other is None:
            if i_var_pos is None:
                errors.append(
                    f"the target takes {name} as positional argument {index + 1}; "
                    f"the impl takes {len(i_pos)} positional argument(s) and no *args"
                )
            elif by_keyword and param.name in i_by_keyword:
                errors.append(
                    f"{name} passed by position lands in the impl's *{i_var_pos.name}, "
                    f"passed by keyword in its parameter {param.name!r}"
                )
        else:
            if other.kind is _P.POSITIONAL_OR_KEYWORD and other.name != param.name:
                if by_keyword:
                    notes.append(
                        f"positional argument {index + 1} is {param.name!r} in the target, {other.name!r} in the impl: "
                        f"a call naming {param.name}= reaches the impl's {other.name!r} (fl_patch passes it on)"
                    )
                elif other.name in reaching:
                    errors.append(
                        f"positional argument {index + 1} goes to the impl's {other.name!r}, "
                        f"which callers of the target also pass by keyword"
                    )
            if other.kind is _P.POSITIONAL_ONLY and by_keyword:
                errors.append(f"{name} is positional-only in the impl; callers of the target may pass it by keyword")
            if optional and other.default is _P.empty:
                errors.append(f"{name} is optional in the target, required in the impl")
            elif optional and not _same_default(param.default, other.default):
                warnings.append(f"default of {name} differs: target {param.default!r}, impl {other.default!r}")
        if by_keyword and other is None:
            keyword = i_by_keyword.get(param.name)
            if keyword is None and i_var_kw is None:
                errors.append(f"the target accepts {name} by keyword; the impl does not")
            elif keyword is not None and optional and keyword.default is _P.empty:
                errors.append(f"{name} is optional in the target, required in the impl")

    for param in t_params:
        if param.kind is not _P.KEYWORD_ONLY:
            continue
        other = i_by_keyword.get(param.name)
        if other is None:
            if i_var_kw is None:
                errors.append(f"the target takes keyword {param.name!r}; the impl does not")
            continue
        if other.kind is _P.POSITIONAL_OR_KEYWORD and i_pos.index(other) < len(t_pos):
            continue  # reported above: a positional slot of the target maps onto it
        if param.default is not _P.empty and other.default is _P.empty:
            errors.append(f"keyword {param.name!r} is optional in the target, required in the impl")
        elif param.default is not _P.empty and not _same_default(param.default, other.default):
            warnings.append(f"default of {param.name!r} differs: target {param.default!r}, impl {other.default!r}")

    if t_var_pos is not None:
        if i_var_pos is None:
            errors.append(f"the target takes *{t_var_pos.name}; the impl does not")
        # (a method declared ``def m(*args)``: its receiver is args[0], the impl's first parameter)
        skip = 1 if receiver and not t_pos else 0
        if skip and i_pos and i_pos[0].kind is _P.POSITIONAL_OR_KEYWORD and i_pos[0].name in reaching:
            errors.append(
                f"the receiver goes to the impl's {i_pos[0].name!r}, which callers of the target pass by keyword"
            )
        for extra in i_pos[len(t_pos) + skip :]:
            errors.append(
                f"the impl's positional parameter {extra.name!r} would receive what callers pass "
                f"to the target's *{t_var_pos.name}"
            )
    if t_var_kw is not None and i_var_kw is None:
        errors.append(f"the target takes **{t_var_kw.name}; the impl does not")

    for index, extra in enumerate(i_pos[len(t_pos) :], start=len(t_pos)):
        fillable_by_keyword = extra.kind is _P.POSITIONAL_OR_KEYWORD and extra.name in reaching
        if t_var_pos is None and extra.default is _P.empty and not fillable_by_keyword:
            errors.append(
                f"the impl requires {extra.name!r} (positional argument {index + 1}); the target has no such parameter"
            )
    for extra in i_params:
        if extra.kind is _P.KEYWORD_ONLY and extra.name not in reaching and extra.default is _P.empty:
            errors.append(f"the impl requires keyword {extra.name!r}, which callers of the target never pass")
    if renames:
        # Two keywords of the target that would reach the impl under one name (one renamed onto a name
        # the target also takes as itself): a call naming both cannot be passed on.
        renamed_to = set(renames.values())
        for name in sorted(t_keyword_names - set(renames)):
            if name in renamed_to:
                errors.append(
                    f"keyword {name!r} of the target is also the impl's name for another position: "
                    "a call naming it cannot be passed on unambiguously"
                )
    findings = [Finding("error", m) for m in _unique(errors)] + [Finding("warning", m) for m in _unique(warnings)]
    return Comparison(findings + [Finding("note", m) for m in _unique(notes)], renames)


def _unique(messages: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(messages))
