"""What a plugin author sees first (issue 47): their own registrations, in ``--list``, ``--check`` and ``--report``.

A two-entry plugin (``tests/support/plugins/fltest_two``) on real megatron-core targets, run as a user runs it
(``python -m fl_patch``, a real subprocess, every shipped pack on): within the first screen (24 lines of 100
columns, stdout and stderr together as a terminal shows them) both registrations are there, with their impls and
their status, and no line is wider than the terminal. The packs are one line each unless asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import REPO, SUPPORT, clean_env

PLUGIN = SUPPORT / "plugins" / "fltest_two"
TARGETS = {
    "megatron.core.utils.divide": "fltest_two.impls.divide",
    "megatron.core.optimizer.clip_grads.get_grad_norm_fp32": "fltest_two.impls.get_grad_norm_fp32",
}
SCREEN_LINES, SCREEN_COLUMNS = 24, 100


def _run(*args: str, columns: int = SCREEN_COLUMNS, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m fl_patch --registry fltest_two.registry ARGS``, stderr merged into stdout as a terminal shows it."""
    return subprocess.run(
        [sys.executable, "-m", "fl_patch", "--registry", "fltest_two.registry", *args],
        env=clean_env(COLUMNS=str(columns), **env),
        cwd=str(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )


def _first_screen(text: str) -> list[str]:
    return text.splitlines()[:SCREEN_LINES]


# The CPU pack's one-line notices (reporting/notices.py): never in --list/--check (test_no_pack_banner_in_check).
_BANNER = "fl_patch CPU pack: "


def _assert_fits(text: str, width: int = SCREEN_COLUMNS) -> None:
    ours = [
        line
        for line in text.splitlines()
        if "UserWarning" not in line and "warnings.warn" not in line and not line.startswith(_BANNER)
    ]
    too_wide = [line for line in ours if len(line) > width]  # megatron's own warnings are not ours to wrap
    assert not too_wide, "\n".join(too_wide)


def _rows_of(screen: list[str], target: str) -> list[str]:
    """The target's line and the lines under it, up to the next line that starts in column 0."""
    start = screen.index(target)
    end = next((i for i in range(start + 1, len(screen)) if not screen[i].startswith(" ")), len(screen))
    return screen[start:end]


def test_list_shows_the_plugins_two_registrations_first_and_each_pack_in_one_line() -> None:
    proc = _run("--list")
    assert proc.returncode == 0, proc.stdout
    screen = _first_screen(proc.stdout)
    assert screen[0].startswith("yours: 2 registration(s) listed, from fltest_two.registry"), proc.stdout
    for target, impl in TARGETS.items():
        (row,) = _rows_of(screen, target)[1:]
        assert row.split() == ["*", "default", "waiting", impl], row
    packs = screen[screen.index(next(line for line in screen if line.startswith("shipped packs"))) + 1 :]
    names = [line.split()[0] for line in packs if line.startswith("  ")]
    assert {"cpu", "flaggems"} <= set(names), proc.stdout
    assert len(proc.stdout.splitlines()) < SCREEN_LINES  # the whole answer is one screen: no pack row listed
    _assert_fits(proc.stdout)


def test_list_all_and_only_pack_show_the_packs_rows_and_why_prints_the_patchdoc() -> None:
    every = _run("--list", "--all")
    assert every.returncode == 0, every.stdout
    assert "pack cpu: " in every.stdout and "fl_patch.impls.cpu." in every.stdout
    assert every.stdout.index("fltest_two.impls.divide") < every.stdout.index("pack cpu: ")  # yours first
    _assert_fits(every.stdout)
    cpu = _run("--list", "--only", "pack=cpu")
    assert cpu.returncode == 0, cpu.stdout
    assert "fltest_two" not in cpu.stdout and "pack flaggems" not in cpu.stdout and "pack cpu: " in cpu.stdout
    why = _run("--list", "--why", "--only", "pack=none", columns=80)
    assert why.returncode == 0, why.stdout
    lines = _rows_of(why.stdout.splitlines(), "megatron.core.utils.divide")
    assert "      why: upstream's divide asserts, which says nothing about the numbers" in lines, why.stdout
    assert "      remove when: upstream's message names the numbers" in lines, why.stdout
    assert any(line.strip().startswith("(no PatchDoc:") for line in why.stdout.splitlines())  # the other one
    _assert_fits(why.stdout, 80)
    typo = _run("--list", "--only", "pack=cpuu")
    assert typo.returncode == 2 and "no registration has pack 'cpuu' (did you mean cpu?)" in typo.stdout


def test_check_confirms_the_plugins_registrations_within_the_first_screen() -> None:
    proc = _run("--check")
    assert proc.returncode == 0, proc.stdout
    screen = _first_screen(proc.stdout)
    assert any(line.startswith("yours: 2 registration(s) checked, from fltest_two.registry: 2 ok") for line in screen)
    for target, impl in TARGETS.items():
        rows = _rows_of(screen, target)
        assert rows[1].split()[:4] == ["*", "default", "ok", "function,"], proc.stdout
        assert rows[2].strip().startswith(f"impl {impl}") and "registry.py:" in " ".join(rows[2:]), proc.stdout
    assert any(line.startswith("activation: ok") for line in proc.stdout.splitlines())
    assert "upstream had None here" not in proc.stdout  # the packs' notes: --all
    _assert_fits(proc.stdout)


def test_no_pack_banner_in_check() -> None:
    proc = _run("--check", "--only", "pack=none")
    assert _BANNER not in proc.stdout


def test_check_wraps_a_long_cause_instead_of_cutting_it(tmp_path: Path) -> None:
    """The near miss at the end of a long cause is still there, on a continuation line, at 60 columns."""
    (tmp_path / "typo_registry.py").write_text(
        "from fl_patch import register\n"
        "register(target='megatron.core.transformer.transformer_layer.TransformerLayer.forwrad',"
        " impl='fltest_two.impls.divide')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "fl_patch", "--registry", "typo_registry", "--check", "--only", "pack=none"],
        env=clean_env(COLUMNS="60"),
        cwd=str(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stdout
    joined = " ".join(line.strip() for line in proc.stdout.splitlines())
    assert "has no attribute 'forwrad'" in joined and "close names there: forward" in joined, proc.stdout
    _assert_fits(proc.stdout, 60)


def test_report_shows_the_plugins_rows_first_and_honours_only_and_all(tmp_path: Path) -> None:
    program = str(PLUGIN / "train.py")
    proc = _run("--report", program, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    report = proc.stdout[proc.stdout.index("fl_patch report (pid") :]
    # The CUDA-on-CPU transfer's notice: one line that fits, said once in the run (never in --check, below).
    assert [line for line in proc.stdout.splitlines() if line.startswith(_BANNER)] == [
        "fl_patch CPU pack: no GPU here; CUDA calls run on the CPU (FL_PATCH_CUDA_ON_CPU=0 turns it off)"
    ], proc.stdout
    screen = _first_screen(report)
    head = next(i for i, line in enumerate(screen) if line.startswith("yours, from fltest_two.registry"))
    rows = {screen[i].split()[-1]: screen[i].split() for i in range(head, len(screen))}
    assert rows["megatron.core.utils.divide"][:3] == ["applied", "1", "default"], report
    assert rows["megatron.core.optimizer.clip_grads.get_grad_norm_fp32"][:3] == ["applied", "0", "default"], report
    assert "fltest_two.impls.divide" in "\n".join(screen) and "shipped packs, one line each" in report
    assert "fl_patch.impls." not in report  # no pack row: one line per pack
    _assert_fits(report)
    only = _run("--report", "--only", "pack=none", program, cwd=tmp_path)
    assert only.returncode == 0, only.stdout
    filtered = only.stdout[only.stdout.index("fl_patch report (pid") :]
    assert "rows matching --only pack=none: 2" in filtered and "shipped packs" not in filtered, filtered
    every = _run("--report", "--all", "--report-file", str(tmp_path / "r.jsonl"), program, cwd=tmp_path)
    assert every.returncode == 0, every.stdout
    (entry,) = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    packs = {record["pack"] for record in entry["records"]}
    assert {"none", "cpu"} <= packs, packs  # the whole table as JSON, each row with its pack


def test_report_options_are_refused_without_a_report() -> None:
    proc = _run("--only", "pack=none", "x.py")
    assert proc.returncode == 2 and "--only goes with --list, --check, --report or --compare" in proc.stdout
    proc = _run("--why", "--check")
    assert proc.returncode == 2 and "--why goes with --list" in proc.stdout


def test_a_vendor_not_chosen_here_is_said_with_what_runs_and_the_setting_that_chooses_it(tmp_path: Path) -> None:
    """A plugin registering under its own vendor name (FlagScale's ``vendor="acme"``) without ``MG_FL_PREFER``: its
    impls are fine but do not run here (the default vendor's does, else upstream). ``--check``'s "ok" and
    ``--list``'s "other vendor chosen" alone let a new user believe their plugin runs: both say what runs
    instead and the setting that chooses theirs, on the row itself."""
    (tmp_path / "acme_reg.py").write_text(
        "from fl_patch import register\n"
        "register(target='megatron.core.utils.divide', impl='acme_impls.divide', vendor='acme')\n"
    )
    (tmp_path / "acme_impls.py").write_text(
        "def divide(numerator, denominator):\n    return numerator // denominator\n"
    )
    env = clean_env(COLUMNS=str(SCREEN_COLUMNS))
    for mode in ("--list", "--check"):
        proc = subprocess.run(
            [sys.executable, "-m", "fl_patch", "--registry", "acme_reg", mode],
            env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout
        rows = _rows_of(_first_screen(proc.stdout), "megatron.core.utils.divide")
        said = " ".join(" ".join(rows).split())  # wrapped lines joined
        assert "not chosen here: " in said and "upstream runs" in said, (mode, proc.stdout)
        assert "MG_FL_PREFER=acme chooses it" in said, (mode, proc.stdout)
        _assert_fits(proc.stdout)
