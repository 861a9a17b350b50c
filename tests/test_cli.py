"""``python -m fl_patch`` / ``fl-patch``: a program runs exactly as ``python`` would run it, patched.

Every test starts real interpreters and compares what the program sees when run
directly and through the launcher. The programs are tiny (``tests/support/activation/act_*``),
so most processes here never import torch or megatron.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fl_patch.activation.launch import interpreter_options

from .conftest import REPO, SUPPORT, clean_env

ARGV_PROGRAM = str(SUPPORT / "activation" / "act_argv.py")
PROBE = str(SUPPORT / "activation" / "act_probe.py")
CONSOLE_SCRIPT = Path(sys.executable).with_name("fl-patch")


def run(
    args: list[str], *, env: dict[str, str] | None = None, cwd: Path = REPO, **kwargs
) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, env=env or clean_env(), cwd=str(cwd), capture_output=True, text=True, timeout=120, **kwargs
    )


def tagged(stdout: str, tag: str) -> dict:
    (line,) = [line for line in stdout.splitlines() if line.startswith(tag)]
    return json.loads(line[len(tag) :])


LAUNCHERS = {
    "python -m fl_patch": [sys.executable, "-m", "fl_patch"],
    "fl-patch": [str(CONSOLE_SCRIPT)],
}


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize(
    "program",
    [
        [ARGV_PROGRAM, "a", "--report", "-m", "x", "--exit", "7"],
        ["-m", "act_argv", "--strict", "b", "--exit", "3"],
        ["-c", "import sys; print('ARGV' + repr(sys.argv).replace(chr(39), chr(34))); sys.exit(4)", "z"],
    ],
    ids=["script", "module", "code"],
)
def test_program_sees_what_python_would_give_it(launcher: str, program: list[str], tmp_path: Path) -> None:
    if launcher == "fl-patch" and not CONSOLE_SCRIPT.exists():
        pytest.skip("the fl-patch console script is not installed in this environment")
    direct = run([sys.executable, *program], cwd=tmp_path)
    launched = run([*LAUNCHERS[launcher], *program], cwd=tmp_path)
    assert launched.returncode == direct.returncode != 0, launched.stderr
    assert tagged(launched.stdout, "ARGV") == tagged(direct.stdout, "ARGV")
    assert launched.stderr == direct.stderr


def test_interpreter_options_reach_the_program(tmp_path: Path) -> None:
    direct = run([sys.executable, "-O", "-B", ARGV_PROGRAM], cwd=tmp_path)
    launched = run([sys.executable, "-O", "-B", "-m", "fl_patch", ARGV_PROGRAM], cwd=tmp_path)
    assert tagged(launched.stdout, "ARGV") == tagged(direct.stdout, "ARGV")
    assert tagged(launched.stdout, "ARGV")["flags"][:2] == [1, 1]


def test_traceback_stdin_and_status_are_the_programs(tmp_path: Path) -> None:
    args = [ARGV_PROGRAM, "--stdin", "--raise"]
    direct = run([sys.executable, *args], input="line 1\nline 2\n", cwd=tmp_path)
    launched = run([sys.executable, "-m", "fl_patch", *args], input="line 1\nline 2\n", cwd=tmp_path)
    assert direct.returncode == launched.returncode == 1
    assert tagged(launched.stdout, "ARGV")["stdin"] == "line 1\nline 2\n"
    assert "ValueError: the program failed" in launched.stderr
    assert launched.stderr == direct.stderr  # not one frame of the launcher


def test_in_process_mode_hides_the_launcher_in_tracebacks(tmp_path: Path) -> None:
    launched = run([sys.executable, "-m", "fl_patch", "--in-process", ARGV_PROGRAM, "--raise", "x"], cwd=tmp_path)
    assert launched.returncode == 1
    data = tagged(launched.stdout, "ARGV")
    assert data["argv"] == [ARGV_PROGRAM, "--raise", "x"] and data["name"] == "__main__"
    assert data["path0"] == str(SUPPORT / "activation")
    assert launched.stderr.startswith("Traceback (most recent call last):\n")
    assert "ValueError: the program failed" in launched.stderr
    # No frame of the launcher (files of the fl_patch package) or of runpy; the clone itself
    # may well be called fl_patch, so the package directory is what is looked for.
    frames = [line for line in launched.stderr.splitlines() if line.lstrip().startswith("File ")]
    assert frames and all(str(REPO / "src" / "fl_patch") + os.sep not in line for line in frames), launched.stderr
    assert "runpy" not in launched.stderr, launched.stderr


def test_the_hook_is_active_before_the_programs_first_import() -> None:
    env = clean_env(FL_PATCH_PACKS="none")
    out = tagged(
        run([sys.executable, "-m", "fl_patch", "--registry", "act_plugin.registry", PROBE], env=env).stdout, "ACT"
    )
    assert out["installed"] and out["greet"] == "patched hello x!" and out["hello"] == "patched hi y"
    assert out["status"] == "applied" and out["late"] is False  # patched as it loaded, not after
    # Without the launcher, the same program runs upstream code.
    plain = tagged(run([sys.executable, PROBE], env=env).stdout, "ACT")
    assert not plain["installed"] and plain["greet"] == "hello x!"


def test_a_registry_next_to_the_script_is_found(tmp_path: Path) -> None:
    """The script's directory joins sys.path after start-up: the registry is loaded at the first import."""
    (tmp_path / "my_registry.py").write_text(
        "from fl_patch import register\nregister('act_target.mod.greet', 'my_impls.greet')\n"
    )
    (tmp_path / "my_impls.py").write_text("def greet(name, punctuation='!'):\n    return 'mine ' + name\n")
    script = tmp_path / "train.py"
    script.write_text((SUPPORT / "activation" / "act_probe.py").read_text())
    env = clean_env(FL_PATCH_PACKS="none")
    proc = run([sys.executable, "-m", "fl_patch", "--strict", "--registry", "my_registry", str(script)], env=env)
    assert proc.returncode == 0, proc.stderr
    out = tagged(proc.stdout, "ACT")
    assert out["greet"] == "mine x" and out["late"] is False
    # A registry that exists nowhere is still reported (strict: the first import fails).
    proc = run([sys.executable, "-m", "fl_patch", "--strict", "--registry", "no_such_registry", str(script)], env=env)
    assert proc.returncode == 1 and "no_such_registry" in proc.stderr


def test_options_become_environment_variables_children_inherit(tmp_path: Path) -> None:
    program = tmp_path / "env.py"
    program.write_text(
        "import json, os, subprocess, sys\n"
        "mine = {k: v for k, v in os.environ.items() if k.startswith(('FL_PATCH', 'MG_FL'))}\n"
        'code = \'import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(("FL_PATCH", "MG_FL"))}))\'\n'
        "child = json.loads(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True).stdout)\n"
        "print('ENV' + json.dumps([mine, child]))\n"
    )
    env = clean_env(FL_PATCH_REGISTRY="act_plugin", FL_PATCH_PACKS="none")
    args = ["--vendor", "MUSA,default", "--registry", "act_plugin.registry", "--strict", "--report-file", "r.jsonl"]
    args += ["--disable", "clip_grads.get_grad_norm_fp32", "--packs=none", "--no-entry-points", "--no-flagscale"]
    mine, child = tagged(
        run([sys.executable, "-m", "fl_patch", *args, str(program)], env=env, cwd=tmp_path).stdout, "ENV"
    )
    assert mine == child
    assert mine["MG_FL_PREFER"] == "musa,default"
    assert mine["FL_PATCH_REGISTRY"] == "act_plugin,act_plugin.registry"
    assert mine["FL_PATCH_STRICT"] == "1" and mine["FL_PATCH_PACKS"] == "none"
    assert mine["FL_PATCH_DISABLE"] == "clip_grads.get_grad_norm_fp32"
    assert mine["FL_PATCH_REPORT_FILE"] == str(tmp_path / "r.jsonl")
    assert mine["FL_PATCH_ENTRY_POINTS"] == "0" and mine["FL_PATCH_FLAGSCALE"] == "0"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "no program to run"),
        (["--bogus", "x.py"], "unknown option '--bogus'"),
        (["--vendor"], "--vendor needs a value"),
        (["--vendor", "no way", "x.py"], "MG_FL_PREFER item 'no way': not a vendor name"),
        (["--list", "x.py"], "--list takes no program"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    proc = run([sys.executable, "-m", "fl_patch", *args])
    assert proc.returncode == 2 and message in proc.stderr and "usage:" in proc.stderr


@pytest.mark.parametrize(
    ("orig_argv", "options"),
    [
        (["python", "-m", "fl_patch", "x.py"], []),
        (["python", "-u", "-X", "dev", "-Wdefault", "-m", "fl_patch", "x.py"], ["-u", "-X", "dev", "-Wdefault"]),
        (["python", "-OIm", "fl_patch", "x.py"], ["-OI"]),
        (["python", "-B", "-mfl_patch", "--list"], ["-B"]),
        (["python", "-E", "/venv/bin/fl-patch", "x.py"], ["-E"]),
        (["python", "--check-hash-based-pycs", "never", "-m", "fl_patch"], ["--check-hash-based-pycs", "never"]),
    ],
)
def test_interpreter_options_are_read_from_the_command_line(orig_argv: list[str], options: list[str]) -> None:
    assert interpreter_options(orig_argv) == options


def test_isolated_interpreter_runs_in_process_and_says_children_are_out_of_reach(tmp_path: Path) -> None:
    program = tmp_path / "iso.py"
    program.write_text("import sys, fl_patch\nprint('INSTALLED', fl_patch.is_active())\nsys.exit(5)\n")
    proc = run([sys.executable, "-I", "-m", "fl_patch", str(program)], cwd=tmp_path)
    assert proc.returncode == 5
    assert "INSTALLED True" in proc.stdout
    assert "runs with -I," in proc.stderr and "will run without fl_patch" in proc.stderr


def test_fl_patch_0_runs_the_program_unpatched() -> None:
    env = clean_env(FL_PATCH="0", FL_PATCH_PACKS="none")
    out = tagged(
        run([sys.executable, "-m", "fl_patch", "--registry", "act_plugin.registry", PROBE], env=env).stdout, "ACT"
    )
    assert not out["installed"] and out["greet"] == "hello x!"


def test_version_and_help() -> None:
    assert run([sys.executable, "-m", "fl_patch", "--version"]).stdout.startswith("fl_patch ")
    help_text = run([sys.executable, "-m", "fl_patch", "--help"]).stdout
    for option in ("--vendor", "--registry", "--strict", "--report", "--list", "--check", "--json", "--in-process"):
        assert option in help_text


def test_launcher_environment_is_not_left_in_this_process() -> None:
    """Guard for the tests themselves: parsing never touches os.environ of the caller."""
    from fl_patch.cli import parse

    before = dict(os.environ)
    options = parse(["--vendor", "musa", "--strict", "x.py", "--vendor", "cpu"])
    assert options.program == ["x.py", "--vendor", "cpu"]  # the program's arguments stay the program's
    assert options.env == {"MG_FL_PREFER": "musa", "FL_PATCH_STRICT": "1"}
    assert dict(os.environ) == before


def test_every_variable_has_one_row_and_the_help_shows_it_aligned() -> None:
    """One table (fl_patch.config.options) for options and variables: Settings' variables, --help and the parser agree."""
    from fl_patch.cli import build_parser, help_text
    from fl_patch.config.options import OPTIONS, variables
    from fl_patch.config.settings import ENV

    names = {value for key, value in vars(ENV).items() if key.isupper()}
    assert set(variables()) == names
    text = help_text("fl-patch", width=100)
    assert text.startswith("usage: fl-patch ")
    for row in OPTIONS:
        assert row.setting in text and all(flag in text for flag in row.flags)
        if row.flags:  # the parser takes every option the help shows
            build_parser("fl-patch").parse_args([*row.flags[:1], *(["x"] if row.takes_value else [])])
    for needed in ("FL_PATCH=0", "FL_PATCH_TRACEBACK=1", "FL_PATCH_TRIGGERS", "--print-pythonpath", "--only"):
        assert needed in text
    lines = text.splitlines()
    assert max(map(len, lines)) <= 120
    # The second column starts at the same place in every section.
    starts = {
        len(line) - len(line[2:].split("  ", 1)[1].lstrip())
        for line in lines
        if line.startswith("  -") and "  " in line[2:]
    }
    assert len(starts) == 1, starts


@pytest.mark.parametrize(
    ("argv0", "prog"),
    [("/venv/bin/fl-patch", "fl-patch"), ("/src/fl_patch/__main__.py", "python -m fl_patch")],
)
def test_the_program_is_named_as_invoked(argv0: str, prog: str) -> None:
    from fl_patch.cli import prog_name

    assert prog_name(argv0) == prog


def test_usage_errors_are_two_lines_with_near_misses() -> None:
    cases = {
        ("--reprot", "x.py"): "unknown option '--reprot' (did you mean --report",
        ("--list", "--only", "vendr=cpu"): "(did you mean vendor?)",
        ("--stric", "x.py"): "(did you mean --strict?)",
        ("--in-process=1", "x.py"): "--in-process takes no value",
        ("--strict=2", "x.py"): "--strict='2': the value of FL_PATCH_STRICT",
        ("--json", "x.py"): "--json goes with --list or --check",
    }
    for args, message in cases.items():
        proc = run([sys.executable, "-m", "fl_patch", *args])
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and len(lines) == 2, proc.stderr
        assert lines[0].startswith("usage: python -m fl_patch ") and lines[1].startswith("python -m fl_patch: error: ")
        assert message in lines[1] and "fl_patch: fl_patch" not in proc.stderr
    if CONSOLE_SCRIPT.exists():
        proc = run([str(CONSOLE_SCRIPT), "--bogus"])
        assert proc.stderr.splitlines()[1].startswith("fl-patch: error: unknown option '--bogus'")


def test_list_filters_suggest_and_stay_within_120_columns() -> None:
    """--only by vendor, source, status and target; a value nothing has is an error naming the near miss."""
    code = (
        "import contextlib, io, json, sys\n"
        "from fl_patch.cli import main\n"
        "def out(*args):\n"
        "    so, se = io.StringIO(), io.StringIO()\n"
        "    with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):\n"
        "        status = main(list(args))\n"
        "    return status, so.getvalue(), se.getvalue()\n"
        "print('OUT' + json.dumps([\n"
        "    out('--list'),\n"
        "    out('--list', '--only', 'vendor=cpu', '--only', 'status=waiting', '--only', 'source=fl_patch.impls.cpu.*'),\n"
        "    out('--list', '--only', 'target=clip_grads'),\n"
        "    out('--list', '--only', 'vendor=cpuu'),\n"
        "    out('--list', '--only', 'status=waitng'),\n"
        "    out('--list', '--only', 'vendor=flaggems'),\n"
        "]))\n"
    )
    proc = run([sys.executable, "-c", code], env=clean_env(FL_PATCH_DISABLE="clip_grads.clip_grad_by_total_norm_fp3"))
    assert proc.returncode == 0, proc.stderr
    every, cpu, clip, typo, status_typo, gems = tagged(proc.stdout, "OUT")
    assert every[0] == 0 and max(len(line) for line in every[1].splitlines()) <= 120
    total = int(every[1].splitlines()[-1].split()[0])
    kept = int(cpu[1].splitlines()[-1].split()[0])
    assert 0 < kept < total
    rows = [line for line in cpu[1].splitlines()[:-1] if line.startswith("  * ")]  # (not a wrapped rest)
    assert rows and all(line.startswith("  * cpu  waiting  fl_patch.impls.") for line in rows)
    head, *listed = clip[1].splitlines()[:-1]
    assert head.startswith("pack cpu: ")  # each pack's rows under its heading
    targets = [line for line in listed if not line.startswith(("  ", "pack "))]
    assert targets and all("clip_grads" in line for line in targets)
    assert typo[0] == 2 and "no registration has vendor 'cpuu' (did you mean cpu?)" in typo[2]
    assert status_typo[0] == 2 and "(did you mean waiting?)" in status_typo[2]
    gem_rows = [line for line in gems[1].splitlines()[:-1] if line.startswith("  ") and not line.startswith(" " * 6)]
    assert gem_rows and {line.lstrip(" *").split()[0] for line in gem_rows} == {"flaggems"}  # (not a wrapped rest)
    # A --disable key no registration has: one warning with the near miss.
    assert "names 'clip_grads.clip_grad_by_total_norm_fp3'" in every[2]
    assert "did you mean 'clip_grads.clip_grad_by_total_norm_fp32'" in every[2]


def test_version_names_torch_and_megatron_core_and_print_pythonpath_the_bootstrap() -> None:
    from importlib.metadata import version

    out = run([sys.executable, "-m", "fl_patch", "--version"]).stdout
    assert f"torch {version('torch')}" in out and f"megatron-core {version('megatron-core')}" in out
    path = run([sys.executable, "-m", "fl_patch", "--print-pythonpath"]).stdout.strip()
    assert (Path(path) / "sitecustomize.py").is_file()
    env = clean_env(
        PYTHONPATH=f"{path}{os.pathsep}{SUPPORT / 'activation'}",
        FL_PATCH_PACKS="none",
        FL_PATCH_REGISTRY="act_plugin.registry",
    )
    assert tagged(run([sys.executable, PROBE], env=env).stdout, "ACT")["greet"] == "patched hello x!"


def test_a_registry_that_fails_is_one_warning_at_the_users_line_or_with_a_pythonpath_hint(tmp_path: Path) -> None:
    (tmp_path / "my_registry.py").write_text("from fl_patch import register\nimport vendor_sdk_not_installed\n")
    env = clean_env(
        FL_PATCH_PACKS="none", PYTHONPATH=f"{tmp_path}{os.pathsep}{SUPPORT / 'activation'}{os.pathsep}{REPO / 'src'}"
    )
    program = ["-c", "import act_target.mod"]
    inside = run([sys.executable, "-m", "fl_patch", "--registry", "my_registry", *program], env=env)
    (line,) = [line for line in inside.stderr.splitlines() if "FlPatchWarning" in line]
    assert line.startswith(f"{tmp_path / 'my_registry.py'}:2: FlPatchWarning: ")  # the user's line, not ours
    assert "No module named 'vendor_sdk_not_installed'" in line
    missing = run([sys.executable, "-m", "fl_patch", "--registry", "my_registyr", *program], env=env)
    (line,) = [line for line in missing.stderr.splitlines() if "FlPatchWarning" in line]
    assert "registry module 'my_registyr' was not found" in line and "(did you mean my_registry?)" in line
    # Where it looked, and the fix (the same message --check gives: host/registry_lookup.py).
    assert "nor in the directory the job started in" in line and "put that directory on PYTHONPATH" in line
    assert str(REPO / "src" / "fl_patch") not in missing.stderr


def test_a_flagscale_tree_says_once_that_it_was_loaded() -> None:
    tree = REPO / "examples" / "flagscale_plugin"
    proc = run(
        [sys.executable, "-m", "fl_patch", "--list"], env=clean_env(PYTHONPATH=f"{tree}{os.pathsep}{REPO / 'src'}")
    )
    said = [line for line in proc.stderr.splitlines() if "FlagScale plugin tree loaded" in line]
    assert len(said) == 1 and str(tree / "megatron" / "plugin") in said[0], proc.stderr
    quiet = run([sys.executable, "-m", "fl_patch", "--list"], env=clean_env())
    assert "FlagScale plugin tree" not in quiet.stderr
