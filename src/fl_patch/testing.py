"""Test helpers for a plugin's own test suite: does my registry patch what it says, here?

::

    # tests/test_my_plugin.py
    from fl_patch.testing import check_registry

    def test_my_patches_apply():
        result = check_registry("my_plugin.registry")
        result.assert_applied()          # every target the plugin registers runs its impl here

    def test_my_norm_is_called():
        check_registry("my_plugin.registry", code=CALL_IT).assert_applied()  # code runs patched

The check runs in a fresh interpreter, started as a job would be (``python -m fl_patch
--strict --registry my_plugin.registry``): a patch is applied as its module is first
imported, which an interpreter that has imported megatron already (pytest's, often) can
only imitate. In that child, the module that owns each target the plugin registers is
imported (which applies the patch), ``code`` runs, and ``fl_patch.report()`` says what
happened; ``assert_applied`` fails with one line per registration that did not run, with
the cause. A registration for a vendor not chosen on this machine is listed as such, not
failed: a ``musa`` impl is checked where ``musa`` runs (or with ``vendor="musa"``).

``python -m fl_patch.testing my_plugin.registry`` runs the same check from a shell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["RegistryCheck", "check_registry"]

_TAG = "FL_PATCH_TESTING_REPORT "


@dataclass
class RegistryCheck:
    """What a fresh interpreter did with a plugin's registrations (``check_registry``'s answer)."""

    registry: str
    records: list[dict[str, object]]  # fl_patch.report() rows of the plugin's targets, as dicts
    returncode: int
    stdout: str
    stderr: str
    problems: list[str] = field(default_factory=list)

    @property
    def applied(self) -> list[str]:
        """Targets where one of the plugin's impls is installed."""
        return sorted({str(r["target"]) for r in self.records if r["status"] == "applied" and self._ours(r)})

    def _ours(self, record: Mapping[str, object]) -> bool:
        return _from_plugin(str(record.get("source", "")), self.registry)

    def failures(self) -> list[str]:
        """One line per target of the plugin that does not run one of its impls here, with the cause."""
        if self.returncode != 0 and not self.records:
            return [f"the patched interpreter exited {self.returncode}:\n{self.stderr[-4000:]}"]
        lines = list(self.problems)
        by_target: dict[str, list[Mapping[str, object]]] = {}
        for record in self.records:
            by_target.setdefault(str(record["target"]), []).append(record)
        for target, records in sorted(by_target.items()):
            ours = [r for r in records if self._ours(r)]
            if not ours:
                continue
            running = [r for r in records if r["status"] == "applied"]
            if running and self._ours(running[0]):
                continue
            if running:
                lines.append(
                    f"{target}: vendor {running[0]['vendor']!r} of {running[0]['source']} runs here, not the plugin's "
                    f"({', '.join(str(r['vendor']) for r in ours)}); pass vendor= or packs= to test yours"
                )
                continue
            chosen = next((r for r in ours if r["vendor"] == r.get("chosen_vendor")), None)
            if chosen is None:  # none of the plugin's vendors is chosen on this machine: not this test's job
                continue
            lines.append(f"{target} [{chosen['vendor']}]: {chosen['status']}: {chosen.get('detail') or '-'}")
        if self.returncode != 0:
            lines.append(f"the patched interpreter exited {self.returncode}:\n{self.stderr[-4000:]}")
        return lines

    def assert_applied(self, targets: Iterable[str] = ()) -> None:
        """Fail unless every target of the plugin chosen here (and each of ``targets``) runs the plugin's impl."""
        problems = self.failures()
        for target in targets:
            if target not in self.applied:
                problems.append(f"{target}: expected to be patched by {self.registry}, it is not")
        if not any(self._ours(r) for r in self.records) and not problems:
            problems.append(f"{self.registry} registered nothing (is it the registry module's name?)")
        if problems:
            raise AssertionError(f"fl_patch: {self.registry}: " + "\n  ".join(["", *problems]).lstrip("\n"))


def _from_plugin(source: str, registry: str) -> bool:
    """A registration made by the registry module or by a module of the same top-level package."""
    root = registry.partition(":")[0].split(".")[0]
    return source == registry or source == root or source.startswith(root + ".")


def check_registry(
    registry: str,
    *,
    code: str = "",
    vendor: str | None = None,
    packs: str | None = None,
    strict: bool = True,
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    timeout: float = 600,
) -> RegistryCheck:
    """Run ``registry`` in a fresh patched interpreter and say what it did (see the module docstring).

    ``vendor`` sets the vendor priority (``MG_FL_PREFER``), ``packs`` the shipped packs
    (``"none"``: only the plugin), ``strict`` makes any patch problem stop the child (its
    traceback is then in the failure); ``env`` is added to this process's environment;
    ``code`` runs in the child after the targets' modules were imported.
    """
    args = [sys.executable, "-m", "fl_patch", "--registry", registry]
    if strict:
        args.append("--strict")
    if vendor is not None:
        args += ["--vendor", vendor]
    if packs is not None:
        args += ["--packs", packs]
    args += [*extra_args, "-m", "fl_patch.testing", "--child", registry]
    # The packs' one-line notices (reporting/notices.py) are not the plugin's test's business.
    environ = {**os.environ, "FL_PATCH_SAID": "*", **(env or {})}
    proc = subprocess.run(args, input=code, env=environ, capture_output=True, text=True, timeout=timeout, check=False)
    records: list[dict[str, object]] = []
    problems: list[str] = []
    for line in proc.stdout.splitlines():
        if line.startswith(_TAG):
            data = json.loads(line[len(_TAG) :])
            records, problems = data["records"], data["problems"]
    return RegistryCheck(registry, records, proc.returncode, proc.stdout, proc.stderr, problems)


def _child(registry: str) -> int:
    """In the patched child: import each target's module, run the code on stdin, print the report."""
    import importlib

    import fl_patch
    from fl_patch.diagnostics.check import _import_owner

    code = sys.stdin.read()
    state = fl_patch.report()
    targets = sorted({r.target for r in state if _from_plugin(r.source, registry)})
    problems = []
    for target in targets:
        owner = _import_owner(target)  # imports the module that owns it: the patch applies there
        if owner.error is not None:
            problems.append(f"{target}: {owner.error}")
    if code:
        exec(compile(code, "<check_registry code>", "exec"), {"__name__": "__check__", "importlib": importlib})
    records = [r.as_dict() for r in fl_patch.report() if r.target in targets]
    sys.stdout.write(_TAG + json.dumps({"records": records, "problems": problems}) + "\n")
    return 0


def _main(argv: list[str]) -> int:
    if argv[:1] == ["--child"] and len(argv) == 2:
        return _child(argv[1])
    if len(argv) != 1 or argv[0].startswith("-"):
        sys.stderr.write("usage: python -m fl_patch.testing REGISTRY_MODULE\n")
        return 2
    result = check_registry(argv[0], env={})
    failures = result.failures()
    for target in result.applied:
        sys.stdout.write(f"applied  {target}\n")
    for line in failures:
        sys.stdout.write(f"FAILED   {line}\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
