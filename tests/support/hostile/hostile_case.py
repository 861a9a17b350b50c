"""One hostile program and what running it must show; the runner shared by bench and tests.

A case is a directory of files (the program, its plugins, a planted module), a command
(``python -m fl_patch main.py`` unless said otherwise) and an environment. Run in default
mode it must do what plain python would (exit status, the program's own ``PROGRAM-OK``
lines) and say each fl_patch problem it names (``warns``) on stderr; run with
``FL_PATCH_STRICT=1`` a case with ``strict_stops`` must exit non-zero with that message.
Every run has a timeout: a hang is a result, not a stuck bench. A case with ``strict_same``
has no fl_patch problem in it (a tool that never imports megatron, say): strict mode must
run it exactly as default mode does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["HostileCase", "Outcome", "describe", "judge", "needs_strict_run", "run_case"]

REPO = Path(__file__).resolve().parents[3]

# A case starts with SIGINT at its default, as from a shell. A runner that ignores SIGINT (a
# pytest-xdist worker, a shell's background job) would pass SIG_IGN on to every case, Python
# then installs no KeyboardInterrupt handler, and each Ctrl-C case would test nothing.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@dataclass(frozen=True)
class HostileCase:
    group: str  # the class of failure (a section of docs/reliability.md)
    name: str
    files: Mapping[str, str]  # relative path -> text, written to the case's directory (dedented)
    command: tuple[str, ...] = ("{python}", "-m", "fl_patch", "main.py")
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the clean environment
    stdout: tuple[str, ...] = ("PROGRAM-OK",)  # each must be on stdout in default mode
    not_stdout: tuple[str, ...] = ()  # none may be on stdout in default mode
    rc: int = 0  # the exit status plain python has
    warns: tuple[str, ...] = ()  # each must be on stderr in default mode (else: lost silently)
    not_stderr: tuple[str, ...] = ()  # none may be on stderr in default mode
    strict_stops: bool = False  # FL_PATCH_STRICT=1 must exit non-zero with every `warns` part
    strict_rc: int | None = None  # the exit status in strict mode, when it must be exact
    strict_stdout: tuple[str, ...] = ()  # each must be on stdout in strict mode too (atexit handlers ran)
    strict_same: bool = False  # no fl_patch problem here: strict mode must run exactly as default does
    timeout: float = 120.0

    @property
    def label(self) -> str:
        return f"{self.group}: {self.name}"


@dataclass
class Outcome:
    rc: int | None  # None: it hung (killed at the timeout)
    stdout: str
    stderr: str

    @property
    def hung(self) -> bool:
        return self.rc is None


def _environment(case: HostileCase, workdir: Path, strict: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not (k.startswith("FL_PATCH") or k == "MG_FL_PREFER")}
    env.pop("PYTHONWARNINGS", None)
    env["PYTHONPATH"] = str(REPO / "src")
    for key, value in case.env.items():
        env[key] = _expand(value, workdir)
    if strict:
        env["FL_PATCH_STRICT"] = "1"
    return {k: v for k, v in env.items() if v != "<unset>"}


def _expand(text: str, workdir: Path) -> str:
    return (
        text.replace("{python}", sys.executable)
        .replace("{dir}", str(workdir))
        .replace("{src}", str(REPO / "src"))
        .replace("{template}", str(REPO / "sitecustomize_template"))
    )


def run_case(case: HostileCase, *, strict: bool) -> Outcome:
    """Run ``case`` in a fresh directory; the outcome, or ``rc=None`` if it hung."""
    with tempfile.TemporaryDirectory(prefix="fl-hostile-") as tmp:
        workdir = Path(tmp)
        for relative, text in case.files.items():
            path = workdir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        command = [_expand(part, workdir) for part in case.command]
        try:
            proc = subprocess.run(
                command,
                env=_environment(case, workdir, strict),
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=case.timeout,
                start_new_session=True,  # a hung case's children die with it (the group is killed)
            )
        except subprocess.TimeoutExpired as exc:
            return Outcome(None, _text(exc.stdout), _text(exc.stderr))
        return Outcome(proc.returncode, proc.stdout, proc.stderr)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def judge(case: HostileCase, default: Outcome, strict: Outcome | None) -> dict[str, bool]:
    """The tallies of one case: which of the four failures it shows (all False is a pass)."""
    broken = _broken(case, default)
    lost = any(part not in default.stderr for part in case.warns)
    not_stopped = False
    if strict is not None and case.strict_stops:
        stopped = not strict.hung and strict.rc != 0 and all(part in strict.stderr for part in case.warns)
        exact = case.strict_rc is None or strict.rc == case.strict_rc
        shown = all(part in strict.stdout for part in case.strict_stdout)
        not_stopped = not (stopped and exact and shown)
    if strict is not None and case.strict_same:
        not_stopped = not_stopped or _broken(case, strict)  # strict mode stopped what it had no cause to
    hung = default.hung or (strict is not None and strict.hung)
    return {"lost_silently": lost, "non_strict_broken": broken, "hung": hung, "strict_wrong": not_stopped}


def needs_strict_run(case: HostileCase) -> bool:
    return case.strict_stops or case.strict_same


def _broken(case: HostileCase, outcome: Outcome) -> bool:
    return (
        outcome.hung
        or outcome.rc != case.rc
        or any(part not in outcome.stdout for part in case.stdout)
        or any(part in outcome.stdout for part in case.not_stdout)
        or any(part in outcome.stderr for part in case.not_stderr)
    )


def describe(case: HostileCase, outcome: Outcome, mode: str) -> str:
    """What a failing test shows: the command, the exit status, the ends of both streams."""
    status = "hung" if outcome.hung else f"exit {outcome.rc}"
    return (
        f"--- {case.label} [{mode}]: {status} (plain python: {case.rc})\n"
        f"stdout:\n{outcome.stdout[-2000:]}\nstderr:\n{outcome.stderr[-4000:]}"
    )
