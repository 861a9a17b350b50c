"""Does an impl call the original with arguments the original takes? Read from the impl's source.

Why: comparing signatures asks whether every call of the target fits the impl. The reverse
breaks too: an impl written for 0.19 that calls ``fl_patch.original(T)(tp_size=tp_size)``
fails on 0.17.1, whose ``_warmup_jit_function()`` takes no argument, although its own
signature (``tp_size=None``, optional) is compatible. The rule for impls is: pass the
original only what you received (``*args, **kwargs``); this check finds the places that
do not, against whichever release is installed (``--check``) or named (``--check --against``).

How: the impl's function source is parsed with ``ast``; every call whose callee is
``original(T)`` (``fl_patch.original(T)(...)``, or a local name assigned from it), with ``T``
the registration's own target (a string literal or a module-level constant), is bound
against the target's signature: named keywords must exist there (or the target takes
``**kwargs``), and the explicit positional arguments must fit. Calls that forward
``*args`` / ``**kwargs`` are checked only for what they name explicitly.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from typing import Any

from fl_patch.core.signatures import Finding

__all__ = ["calls_to_original", "forwarding_findings", "string_value"]


def _function_of(impl: object) -> Any:
    plain = impl.__func__ if isinstance(impl, (staticmethod, classmethod)) else impl
    plain = plain.fget if isinstance(plain, property) else plain
    plain = inspect.unwrap(plain) if callable(plain) else None
    # Only a function's body is read for calls of the original (a class or other callable: nothing to read).
    return plain if isinstance(plain, types.FunctionType) else None


def string_value(node: ast.AST, constants: dict[str, object]) -> str | None:
    """The string an expression spells from literals and module string constants, else None.

    Targets are written as literals, constants, f-strings of constants (``f"{_SPECS}.get_spec"``) or
    sums of them; each form must be read, or a call of the original in it would go unchecked.
    """
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        value = constants.get(node.id)
        return value if isinstance(value, str) else None
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            if isinstance(part, ast.FormattedValue):
                if part.conversion != -1 or part.format_spec is not None:
                    return None
                part = part.value
            text = string_value(part, constants)
            if text is None:
                return None
            parts.append(text)
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = string_value(node.left, constants), string_value(node.right, constants)
        return None if left is None or right is None else left + right
    return None


def calls_to_original(tree: ast.AST, target: str, constants: dict[str, object]) -> list[ast.Call]:
    """Calls of ``original(target)`` in ``tree`` (directly, or through a name assigned from it)."""

    def names_target(node: ast.AST) -> bool:
        if not (isinstance(node, ast.Call) and node.args):
            return False
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if called != "original":
            return False
        return string_value(node.args[0], constants) == target

    aliases = {
        t.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and names_target(node.value)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (
            names_target(node.func) or (isinstance(node.func, ast.Name) and node.func.id in aliases)
        ):
            found.append(node)
    return found


def forwarding_findings(
    impl: object,
    target: str,
    signature: inspect.Signature,
    *,
    tree: ast.AST | None = None,
    constants: dict[str, object] | None = None,
) -> list[Finding]:
    """Errors for each call of the original in ``impl`` that ``signature`` does not accept.

    ``signature`` is the original's as it is called (a method's includes ``self``).
    ``tree`` / ``constants``: the impl's parsed ``def`` and its module's string constants, when
    it is not imported (the static drift check).
    """
    if tree is None:
        function = _function_of(impl)
        if function is None:
            return []
        try:
            source = textwrap.dedent(inspect.getsource(function))
            tree = ast.parse(source)
            ast.increment_lineno(tree, function.__code__.co_firstlineno - 1)  # the impl file's lines
        except (OSError, TypeError, SyntaxError, ValueError):
            return []
        constants = {k: v for k, v in getattr(function, "__globals__", {}).items() if isinstance(v, str)}
    findings = []
    constants = constants or {}
    for call in calls_to_original(tree, target, constants):
        problem = _binds(call, signature)
        if problem is not None:
            shown = ast.unparse(call)
            shown = shown if len(shown) <= 100 else shown[:97] + "..."
            findings.append(
                Finding(
                    "error",
                    f"the impl calls the original as `{shown}` (line {call.lineno} of the impl's file), which the "
                    f"target{signature} does not accept: {problem}. Pass the original only what the impl received",
                )
            )
    return findings


def _binds(call: ast.Call, signature: inspect.Signature) -> str | None:
    P = inspect.Parameter
    params = list(signature.parameters.values())
    var_kw = any(p.kind is P.VAR_KEYWORD for p in params)
    var_pos = any(p.kind is P.VAR_POSITIONAL for p in params)
    starred = any(isinstance(a, ast.Starred) for a in call.args)
    double_starred = any(k.arg is None for k in call.keywords)
    keywords = [k.arg for k in call.keywords if k.arg is not None]
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    by_name = {p.name: p for p in params if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)}
    for name in keywords:
        if name not in by_name and not var_kw:
            return f"it has no parameter {name!r}"
    if not starred and not double_starred:
        try:
            signature.bind(*range(len(positional)), **dict.fromkeys(keywords))
        except TypeError as exc:
            return str(exc)
        return None
    slots = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    if len(positional) > len(slots) and not var_pos:
        return f"{len(positional)} positional arguments for {len(slots)} positional parameters"
    return None
