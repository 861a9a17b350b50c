"""The report file (``--report-file PATH``, ``FL_PATCH_REPORT_FILE``) is written safely.

From the issue "What real programs do to an import hook": the file is created mode
0600 (it holds the command line and the paths of the job), a symbolic link at the path
is never followed (a link planted in a shared directory would otherwise make the job
append to whatever it points at), and command-line values that look like secrets
(``--api-key=...``, ``--token ...``, ``password=...``) are redacted in the JSON. A
report problem never changes the program's exit status.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO, clean_env

PROGRAM = """
import os, sys
os.umask(0o022)  # the usual umask: files are world-readable unless created otherwise
from act_target import mod
print("PROGRAM-RAN", mod.greet("x"))
sys.exit(7)
"""


def launch(tmp_path: Path, report: Path, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "job.py"
    script.write_text(PROGRAM)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "fl_patch",
            "--report-file",
            str(report),
            "--registry",
            "act_plugin.registry",
            str(script),
            *args,
        ],
        env=clean_env(FL_PATCH_PACKS="none", FL_PATCH_ENTRY_POINTS="0", FL_PATCH_FLAGSCALE="0"),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_report_file_is_created_mode_0600(tmp_path: Path) -> None:
    """Bullet: report file: create 0600.

    Today it is created 0644 (less the umask: 0644 here). Expected: 0600.
    """
    report = tmp_path / "report.jsonl"
    proc = launch(tmp_path, report)
    assert proc.returncode == 7 and "PROGRAM-RAN patched hello x!" in proc.stdout, proc.stderr[-2000:]
    assert report.exists(), proc.stderr[-2000:]
    mode = stat.S_IMODE(os.stat(report).st_mode)
    assert mode == 0o600, f"report file created with mode {mode:o}"


def test_a_symlink_at_the_report_path_is_not_followed(tmp_path: Path) -> None:
    """Bullet: report file: do not follow symlinks.

    The report path is a symbolic link to another file. Today the JSON line is appended
    to that file. Expected: the file the link points at is untouched, the link stays a
    link, stderr says why no report was written there (naming the path and the link),
    and the program's exit status is its own.
    """
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "report.jsonl"
    link.symlink_to(victim)
    proc = launch(tmp_path, link)
    assert proc.returncode == 7 and "PROGRAM-RAN" in proc.stdout, proc.stderr[-2000:]
    assert victim.read_text() == "precious\n", "the report was appended to the file the symlink points at"
    assert link.is_symlink()
    said = [line for line in proc.stderr.splitlines() if link.name in line and "link" in line.lower()]
    assert said, f"nothing on stderr names the report path and the link:\n{proc.stderr[-2000:]}"


def test_secret_looking_argv_values_are_redacted_in_the_report(tmp_path: Path) -> None:
    """Bullet: report file: do not record argv values that look like secrets.

    Expected: the values of --api-key=..., --token ... and password=... do not appear in
    the JSON; the option names and the other arguments (--lr 0.1) still do.
    """
    report = tmp_path / "report.jsonl"
    secrets = ("sk-SECRET-ONE", "tok-SECRET-TWO", "pw-SECRET-THREE")
    args = (f"--api-key={secrets[0]}", "--token", secrets[1], f"password={secrets[2]}", "--lr", "0.1")
    proc = launch(tmp_path, report, *args)
    assert proc.returncode == 7, proc.stderr[-2000:]
    text = report.read_text()
    leaked = [secret for secret in secrets if secret in text]
    assert not leaked, f"secrets written to the report file: {leaked}"
    (entry,) = [json.loads(line) for line in text.splitlines()]
    argv = entry["argv"]
    assert "--lr" in argv and "0.1" in argv, argv
    for name in ("--api-key", "--token", "password"):
        assert any(name in word for word in argv), (name, argv)
