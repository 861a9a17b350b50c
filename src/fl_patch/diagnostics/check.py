"""``--list`` (what is registered) and ``--check`` (does each registration fit the installed Megatron).

``--list`` loads every registration source (packs, ``FL_PATCH_REGISTRY``, entry
points, a FlagScale plugin tree) and reads the registry; nothing of megatron.core is
imported. Choosing the vendor needs the platform, so torch is imported.

``--check`` is what a vendor runs after upgrading Megatron. It installs fl_patch as a
real run would (so upstream modules that need a stand-in, such as megatron.core's
triton-only module on a CPU machine, import as they would in the job), imports the
module that owns every target, loads every impl of every vendor, takes the engine's
status of each patch, then uninstalls (every original back in place) and compares
each impl with the *upstream* object it replaces:

- the target exists (or is created on purpose: ``create=True``);
- the impl imports. An impl that needs a package not installed here (a vendor SDK)
  is *skipped* when its vendor is not active on this machine, an error when it is;
- it can stand in: a class subclasses the original and its constructor accepts the
  original's calls; a function, method, staticmethod, classmethod or property getter
  accepts every call the original accepts, binding each argument the same way
  (``fl_patch.core.signatures``); a module replaced whole exports every public name the
  upstream module defines (read from its source with ``ast``: the upstream module may
  not be importable here, which is why it is replaced).

Problems of the sources themselves (a registry module that fails to import) are
errors too. The exit status of ``--check`` is 1 when anything is an error.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import inspect
import os
import subprocess
import sys
import types
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from fl_patch.activation import install as _activation
from fl_patch.config.settings import ENV
from fl_patch.core.errors import FlPatchWarning
from fl_patch.core.kinds import fits as _fits
from fl_patch.core.kinds import prefixed, read_signature
from fl_patch.core.located import users_line
from fl_patch.core.missing import (
    locate,
    mock_stand_in,
    names_lacking,
    reexported_from,
    unusable,
    upstream_mock,
    upstream_none,
)
from fl_patch.core.records import PatchRecord, Status
from fl_patch.core.registration import Registration
from fl_patch.core.resolve import Kind, Resolved, load_impl, owned_path
from fl_patch.core.signatures import Finding, compare_signatures
from fl_patch.diagnostics.forwarding import forwarding_findings
from fl_patch.reporting.layout import NOT_IN_A_PACK, owner_of
from fl_patch.runtime import RUNTIME

__all__ = ["CheckReport", "CheckResult", "Listed", "check", "list_registrations"]

# Problems of a registration source (not of one patch): --check fails on them.
_SOURCE_PROBLEMS = (
    "registry module",
    "pack registry",
    "entry point",
    "FL_PATCH_PACKS names unknown pack",
    "FlagScale registry",
    "cannot read installed entry points",
)


def megatron_core_version() -> str | None:
    from fl_patch.core.gates import installed_version

    return installed_version("megatron-core")  # metadata, or a source tree's package_info.py


# ---------------------------------------------------------------------------------- --list
@dataclass(frozen=True)
class Listed:
    """One registration as ``--list`` shows it."""

    target: str
    method_key: str
    vendor: str
    vendors: tuple[str, ...]  # every vendor registered for this target
    chosen_vendor: str | None
    impl: str
    status: str
    detail: str
    source: str
    requires: str | None = None  # the version gate
    pack: str = NOT_IN_A_PACK  # the shipped pack it belongs to, or "none": the user's (reporting/layout.py)
    where: str | None = None  # file:line of its register() call
    doc: dict[str, str] | None = None  # its PatchDoc (why, how, upstream, remove_when), if it has one

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["vendors"] = list(self.vendors)
        return data


def list_registrations() -> list[Listed]:
    """Every registration, from every source, with the vendor that would be chosen here."""
    _activation.load_sources()
    records = RUNTIME.engine.records()
    vendors: dict[str, list[str]] = {}
    for record in records:
        vendors.setdefault(record.target, []).append(record.vendor)
    registrations = {(r.target, r.vendor): r for r in RUNTIME.registry.registrations()}
    listed = []
    for record in sorted(records, key=lambda r: (r.target, r.vendor != r.chosen_vendor, r.vendor)):
        registration = registrations.get((record.target, record.vendor))
        detail = record.detail
        if record.status is Status.WAITING and not RUNTIME.installed:
            detail = "applies when its module is imported" if record.vendor == record.chosen_vendor else detail
        listed.append(
            Listed(
                target=record.target,
                method_key=record.method_key,
                vendor=record.vendor,
                vendors=tuple(vendors[record.target]),
                chosen_vendor=record.chosen_vendor,
                impl=record.impl,
                status=record.status.value,
                detail=detail,
                source=record.source,
                requires=record.requires,
                pack=owner_of(record.source),
                where=_where(registration),
                doc=registration.doc.as_dict() if registration is not None and registration.doc else None,
            )
        )
    return listed


def _where(registration: Registration | None) -> str | None:
    """``file:line`` of a registration's ``register()`` call (the user's line, for their messages)."""
    if registration is None or registration.where is None:
        return None
    filename, line = registration.where
    return f"{filename}:{line}"


# ---------------------------------------------------------------------------------- --check
@dataclass
class CheckResult:
    """The verdict on one registration."""

    target: str
    method_key: str
    vendor: str
    chosen_vendor: str | None
    impl: str
    source: str
    kind: str | None = None  # of the upstream object: function, method, class, module, ...
    target_found: bool = False
    impl_loaded: bool = False
    signature: str = "not compared"  # compatible, incompatible, not compared, not applicable
    engine_status: str | None = None  # what the engine did with it (chosen registrations)
    findings: list[Finding] = field(default_factory=list)
    skipped: str | None = None  # why the impl could not be checked here
    requires: str | None = None  # the version gate
    not_for_version: str | None = None  # the gate excludes the installed release: not checked, not applied
    pack: str = NOT_IN_A_PACK  # the shipped pack it belongs to, or "none": the user's (reporting/layout.py)
    where: str | None = None  # file:line of its register() call

    @property
    def level(self) -> str:
        if self.not_for_version:
            return "not for this version"
        if any(f.level == "error" for f in self.findings):
            return "error"
        if self.skipped:
            return "skipped"
        if any(f.level == "warning" for f in self.findings):
            return "warning"
        return "ok"

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["findings"] = [f.as_dict() for f in self.findings]
        data["level"] = self.level
        return data


@dataclass
class CheckReport:
    megatron_core: str | None
    vendors: tuple[str, ...]
    results: list[CheckResult]
    source_problems: list[str]
    messages: list[str]  # other warnings seen while importing (e.g. an unverified release)
    activation: dict[str, object] | None = None
    notes: list[str] = field(default_factory=list)  # about the packs and this machine (GPU-only stand-ins served)

    @property
    def failed(self) -> bool:
        return (
            any(r.level == "error" for r in self.results)
            or bool(self.source_problems)
            or (self.activation is not None and not self.activation.get("ok", False))
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "megatron_core": self.megatron_core,
            "vendors": list(self.vendors),
            "ok": not self.failed,
            "registrations": [r.as_dict() for r in self.results],
            "source_problems": self.source_problems,
            "messages": self.messages,
            "notes": self.notes,
            "activation": self.activation,
        }


@dataclass
class _Owner:
    module: types.ModuleType | None = None
    attr_path: tuple[str, ...] | None = None  # None: the target is a module, replaced whole
    module_spec: importlib.machinery.ModuleSpec | None = None  # the upstream module, for whole-module targets
    error: str | None = None


def check(*, activation: bool = True) -> CheckReport:
    """Import, load and compare everything; see the module docstring. Changes this process's environment."""
    # A check collects problems, it does not stop at the first; and FL_PATCH=0 must not
    # turn off the very thing being checked.
    os.environ[ENV.STRICT] = "0"
    os.environ.pop(ENV.ENABLED, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _activation.install()
        _activation.load_sources()
        registrations = sorted(RUNTIME.registry.registrations(), key=lambda r: (r.target, r.vendor))
        # A registration gated out of this release is neither imported nor loaded: its target
        # may not exist here, which is the point of the gate.
        current = [r for r in registrations if r.for_this_version()]
        owners = {target: _import_owner(target) for target in sorted({r.target for r in current})}
        impls = {id(r): _load(r) for r in current}
        records = {(r.target, r.vendor): r for r in RUNTIME.engine.records()}
        # A vendor named by mistake (MG_FL_PREFER=cpuu) was said to be ignored: not one "here".
        vendors = tuple(v for v in RUNTIME.engine.vendors() if v not in RUNTIME.vendor_typos)
    _activation.uninstall()  # every original back: compare against upstream, not the patch
    registered = frozenset((owner_of(r.source), r.target) for r in registrations)  # (whose, target)
    results = [
        _check_one(r, owners[r.target], impls[id(r)], records.get((r.target, r.vendor)), vendors, registered)
        if r.for_this_version()
        else _not_for_version(r, records.get((r.target, r.vendor)))
        for r in registrations
    ]
    source_problems, messages = [], []
    for warning in caught:
        text = str(warning.message)
        if issubclass(warning.category, FlPatchWarning) and text.startswith("fl_patch: cannot patch"):
            continue  # a registration's problem: in its result, from the engine status
        if any(marker in text for marker in _SOURCE_PROBLEMS) and issubclass(warning.category, FlPatchWarning):
            source_problems.append(text)
        elif issubclass(warning.category, (FlPatchWarning, RuntimeWarning)):
            messages.append(text)
    # Targets the user registered: what is said about them is theirs; about the rest, the packs' notes.
    user_targets = {r.target for r in registrations if owner_of(r.source) == NOT_IN_A_PACK}
    messages.extend(_all_gated_out([r for r in registrations if r.target in user_targets]))
    notes = _all_gated_out([r for r in registrations if r.target not in user_targets])
    notes.extend(_stand_ins_served())
    report = CheckReport(
        megatron_core=megatron_core_version(),
        vendors=tuple(vendors),
        results=results,
        source_problems=list(dict.fromkeys(source_problems)),
        messages=list(dict.fromkeys(messages)),
        notes=list(dict.fromkeys(notes)),
    )
    if activation:
        report.activation = check_activation()
    return report


def _not_for_version(registration: Registration, record: PatchRecord | None) -> CheckResult:
    assert registration.gate is not None
    return _result(registration, record, not_for_version=registration.gate.describe())


def _result(registration: Registration, record: PatchRecord | None, **verdict: Any) -> CheckResult:
    """A registration's row: what it is, what the engine did with it (``record``), and ``verdict``."""
    return CheckResult(
        target=registration.target,
        method_key=registration.method_key,
        vendor=registration.vendor,
        chosen_vendor=record.chosen_vendor if record is not None else None,
        impl=registration.impl_name,
        source=registration.source,
        engine_status=record.status.value if record is not None else None,
        requires=registration.requires,
        pack=owner_of(registration.source),
        where=_where(registration),
        **verdict,
    )


def _stand_ins_served() -> list[str]:
    """Which megatron modules imported a missing GPU-only package and got the stand-in (hooks/gpu_only.py)."""
    from fl_patch.host.gpu_only import served

    return [
        f"{package} is not installed (GPU-only): megatron modules that import it unguarded got fl_patch's "
        f"stand-in, whose kernels raise when called: {', '.join(importers)}"
        for package, importers in served().items()
    ]


def _import_failure(name: str, exc: BaseException) -> str:
    """'module X fails to import: ...', naming the module whose import failed when it is another one."""
    from fl_patch.host.gpu_only import importer_of

    text = f"module {name} fails to import: {type(exc).__name__}: {exc}"
    culprit = importer_of(exc)
    if culprit is not None and culprit != name and culprit.startswith("megatron"):
        text += f" (raised in {culprit})"
    return text


def _all_gated_out(registrations: list[Registration]) -> list[str]:
    """One message per set of gates whose every target's registrations are all gated out here: upstream runs.

    Targets with the same gates share one message (a release-specific family of names, such as the TE
    registry's 0.17 mamba modules, is one line, not one line per name)."""
    by_target: dict[str, list[Registration]] = {}
    for registration in registrations:
        by_target.setdefault(registration.target, []).append(registration)
    by_gates: dict[tuple[str, str], list[str]] = {}
    for target, found in by_target.items():
        if all(r.gate is not None and not r.for_this_version() for r in found):
            gates = "; ".join(sorted({f"{r.vendor}: {r.requires}" for r in found}))
            version = found[0].gate.describe().rpartition("(")[2].rstrip(")")  # type: ignore[union-attr]
            by_gates.setdefault((version, gates), []).append(target)
    messages = []
    for (version, gates), targets in by_gates.items():
        verdict = f"no registration is for this version ({version}; gates {gates}): upstream runs unpatched"
        if len(targets) == 1:
            messages.append(f"{targets[0]}: {verdict}")
        else:
            messages.append(f"{len(targets)} targets: {verdict}: {', '.join(targets)}")
    return messages


def check_activation() -> dict[str, object]:
    """Start a child as ``python -m fl_patch`` would, and ask whether fl_patch is active in it."""
    from fl_patch.activation.launch import child_environment

    env = child_environment(dict(os.environ))
    code = "import fl_patch, sys; sys.stdout.write('active' if fl_patch.is_active() else 'inactive')"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"ok": False, "detail": f"could not start {sys.executable}: {exc}"}
    ok = proc.returncode == 0 and proc.stdout.strip() == "active"
    detail = "a child Python started with the launcher's environment activates fl_patch"
    if not ok:
        detail = f"a child Python with the launcher's environment did not activate fl_patch: {proc.stdout.strip()} {proc.stderr.strip()[-500:]}"
    return {"ok": ok, "detail": detail, "pythonpath": env.get("PYTHONPATH", "")}


def _import_owner(target: str) -> _Owner:
    parts = tuple(target.split("."))
    module = None
    absent = None  # the outermost module found missing: megatron when megatron-core is not installed
    for end in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:end])
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                absent = exc.name
                continue
            return _Owner(error=_import_failure(name, exc))
        except Exception as exc:  # noqa: BLE001  (an upstream module that breaks is the finding)
            return _Owner(error=_import_failure(name, exc))
        break
    if module is None:
        # Named by the missing module, not the target: one cause (megatron-core absent), one text
        # for every target it takes, which ``--check`` then says once with the count.
        hint = " (megatron-core is not installed in this Python)" if absent == "megatron" else ""
        return _Owner(error=f"no module named {absent or parts[0]!r}{hint}")
    attr_path = owned_path(module, parts)
    if attr_path is not None:
        return _Owner(module=module, attr_path=attr_path)
    # The target is a submodule, replaced whole: where would upstream's come from?
    search = getattr(module, "__path__", None)
    spec = None
    if search is not None:
        try:
            spec = importlib.machinery.PathFinder.find_spec(target, list(search))
        except (ImportError, ValueError):
            spec = None
    try:
        importlib.import_module(target)  # so the engine applies (or fails) the replacement
    except Exception:  # noqa: BLE001  (its status says why)
        pass
    return _Owner(module=module, attr_path=None, module_spec=spec)


def _load(registration: Registration) -> tuple[object, BaseException | None]:
    try:
        return load_impl(registration.impl), None
    except Exception as exc:  # noqa: BLE001
        return None, exc


def _check_one(
    registration: Registration,
    owner: _Owner,
    loaded: tuple[object, BaseException | None],
    record: PatchRecord | None,
    vendors: tuple[str, ...],
    registered: frozenset[tuple[str, str]],
) -> CheckResult:
    result = _result(registration, record)
    version = megatron_core_version()
    where = f" (installed megatron-core {version})" if registration.target.startswith("megatron.") and version else ""
    findings = result.findings
    resolved: Resolved | None = None
    if owner.error is not None:
        findings.append(Finding("error", f"target: {owner.error}"))
    elif owner.attr_path is None:
        result.kind = Kind.MODULE.value
        if owner.module_spec is not None:
            result.target_found = True
        elif registration.create:
            findings.append(Finding("warning", "no such module upstream: it is created (create=True)"))
        else:
            findings.append(Finding("error", f"target missing: no module {registration.target}{where}"))
    else:
        try:
            resolved, attr_path, note = locate(owner.module, owner.attr_path)  # type: ignore[arg-type]
        except AttributeError as exc:
            findings.append(Finding("error", f"target missing: {exc}{where}"))
        else:
            cause = unusable(owner.module, attr_path, resolved, where)  # type: ignore[arg-type]
            if note:
                findings.append(Finding("warning", note))
            filled = upstream_none(owner.module, attr_path, resolved)  # type: ignore[arg-type]
            if filled is not None:
                findings.append(Finding("note", filled))  # ok: what a vendor fills in (the engine's record too)
            home = reexported_from(owner.module, attr_path, resolved)  # type: ignore[arg-type]
            if home is not None and (owner_of(registration.source), home) not in registered:
                findings.append(_reexport_finding(registration, home))
            mocked = upstream_mock(resolved)
            if mocked is not None:
                findings.append(Finding("note", mocked))  # ok: replaced as the engine does, without a fit check
            if cause is None:
                result.target_found = True
                result.kind = resolved.kind.value
            elif registration.create:
                findings.append(Finding("warning", "no such attribute upstream: it is created (create=True)"))
                resolved = None
            else:
                findings.append(Finding("error", f"target missing: {cause}"))
                resolved = None

    impl, error = loaded
    if error is not None:
        missing = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
        own_root = registration.impl_name.split(".")[0].split(":")[0]
        foreign = missing is not None and missing.split(".")[0] not in (own_root, "megatron")
        if foreign and registration.vendor not in vendors:
            result.skipped = (
                f"the impl needs {missing!r}, not installed here, and vendor {registration.vendor!r} "
                f"is not active on this machine (active: {', '.join(vendors)}): run --check where it is"
            )
        else:
            line = users_line(error)
            place = f" (raised at {line[0]}:{line[1]})" if line is not None else ""
            findings.append(Finding("error", f"impl does not import: {type(error).__name__}: {error}{place}"))
    else:
        result.impl_loaded = True

    if result.impl_loaded and result.target_found:
        if owner.attr_path is None:
            fit = _module_fits(owner.module_spec, impl)
        else:
            assert resolved is not None
            stand_in = mock_stand_in(resolved.raw)  # as the engine: a mock has no shape to fit
            lacking = None if stand_in else _lacks_receiver(registration.target, resolved, impl)
            fit = [] if stand_in else [lacking] if lacking is not None else _fits(resolved, impl)
            forwarding = [] if stand_in else _forwarding_of(registration.target, resolved, impl)
            fit = None if fit is None and not forwarding else [*(fit or []), *forwarding]
        findings.extend(fit or [])
        if result.kind in (Kind.ATTRIBUTE.value, Kind.MODULE.value) and owner.attr_path is not None:
            result.signature = "not applicable"  # (a value, or a module bound to a name: any object will do)
        elif fit is None:
            result.signature = "not compared"  # (upstream's signature cannot be read: a C function)
        else:
            result.signature = "incompatible" if any(f.level == "error" for f in fit) else "compatible"

    if record is not None and record.status.is_problem and registration.vendor == record.chosen_vendor:
        if not any(f.level == "error" for f in findings):
            findings.append(Finding("error", f"the engine reports {record.status.value}: {record.detail}"))
    return result


def _reexport_finding(registration: Registration, home: str) -> Finding:
    """A target that names another module's function or class, when its home is not registered too.

    Patching it reaches what imports that name; code that reaches it through its home keeps upstream's. A
    plugin's own row says so as a warning; a shipped pack's patches such names on purpose, so there it is a
    note (``--all`` shows it). The same owner registering the home as well is the deliberate form: nothing is said.
    """
    module = home.rpartition(".")[0]
    named_in = registration.target.rpartition(".")[0]
    level = "warning" if owner_of(registration.source) == NOT_IN_A_PACK else "note"
    return Finding(
        level,
        f"a re-export of {home}: patching {registration.target} reaches what imports it from {named_in}, not code "
        f"that reaches it through {module} (that module's own calls, modules that import it from there), which "
        f"keeps upstream's. To reach every caller, target {home}",
    )


def _lacks_receiver(target: str, resolved: Resolved, impl: object) -> Finding | None:
    """An impl of a method written without ``self``: one finding that says so, not one per shifted argument.

    Recognised when the impl's parameters are the target's without its first (the receiver), or
    begin with the target's second: the impl was written as if the method were a module function.
    """
    if resolved.kind is not Kind.METHOD or not inspect.isfunction(impl):
        return None
    theirs, _ = read_signature(resolved.raw, "target")
    mine, _ = read_signature(impl, "impl")
    if theirs is None or mine is None:
        return None
    target_names = [p.name for p in theirs.parameters.values()]
    impl_names = [p.name for p in mine.parameters.values()]
    if len(target_names) < 2 or not impl_names or impl_names[0] == target_names[0]:
        return None
    if impl_names[0] != target_names[1]:
        return None
    receiver = target_names[0]
    method = target.rpartition(".")[2]
    return Finding(
        "error",
        f"the impl lacks {receiver!r}: {target} is a method, so its impl is called with the instance first "
        f"(write def {getattr(impl, '__name__', method)}({receiver}, {', '.join(impl_names)}))",
    )


def _forwarding_of(target: str, resolved: Resolved, impl: object) -> list[Finding]:
    """The impl's calls of the original that the installed original does not accept (introspection/forwarding.py)."""
    raw = resolved.raw
    if resolved.kind in (Kind.STATICMETHOD, Kind.CLASSMETHOD):
        raw = raw.__func__  # type: ignore[attr-defined]
    elif resolved.kind not in (Kind.FUNCTION, Kind.METHOD):
        return []
    sig, _ = read_signature(raw, "target")
    if sig is None:
        return []
    if resolved.kind is Kind.CLASSMETHOD:  # the original is called bound: cls is not passed
        sig = sig.replace(parameters=list(sig.parameters.values())[1:])
    return forwarding_findings(impl, target, sig)


def _module_fits(spec: importlib.machinery.ModuleSpec | None, impl: object) -> list[Finding] | None:
    """A module replaced whole must export what the upstream module defines at top level."""
    if not isinstance(impl, types.ModuleType):
        return [Finding("error", f"the target is a module, the impl a {type(impl).__name__}")]
    origin = getattr(spec, "origin", None)
    if not origin or not os.path.isfile(origin) or not origin.endswith(".py"):
        return None
    try:
        with open(origin, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=origin)
    except (OSError, SyntaxError, ValueError) as exc:
        return [Finding("warning", f"cannot read the upstream module's source: {exc}")]
    findings = []
    missing = names_lacking(origin, impl)  # the engine's own rule (core.missing): it refuses the same
    if missing:
        findings.append(
            Finding("error", f"the replacement module lacks names the upstream module defines: {', '.join(missing)}")
        )
    for node in tree.body:
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and not node.decorator_list
            and hasattr(impl, node.name)
        ):
            upstream = _signature_from_ast(node.args)
            theirs, problem = read_signature(getattr(impl, node.name), f"impl's {node.name}")
            if theirs is None:
                findings.append(problem)  # type: ignore[arg-type]
                continue
            for finding in compare_signatures(upstream, theirs):
                if finding.level == "error":  # upstream defaults are source text here: only errors count
                    findings.append(prefixed(finding, f"{node.name}: "))
    return findings


class _SourceDefault:
    """A default value known only as source text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _signature_from_ast(args: ast.arguments) -> inspect.Signature:
    P = inspect.Parameter
    params: list[inspect.Parameter] = []
    positional = [*args.posonlyargs, *args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for index, (arg, default) in enumerate(zip(positional, defaults, strict=True)):
        kind = P.POSITIONAL_ONLY if index < len(args.posonlyargs) else P.POSITIONAL_OR_KEYWORD
        value = P.empty if default is None else _SourceDefault(ast.unparse(default))
        params.append(P(arg.arg, kind, default=value))
    if args.vararg is not None:
        params.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        value = P.empty if default is None else _SourceDefault(ast.unparse(default))
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=value))
    if args.kwarg is not None:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)
