"""``python -m fl_patch --list`` and ``--check``, in fresh interpreters, on act_target and on real megatron-core."""

from __future__ import annotations

import json
import subprocess
import sys

from ..conftest import REPO, clean_env


def fl_patch(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fl_patch", *args],
        # the test's registrations only: no pack, nor fl_patch's own (the rank check's, job/registry.py)
        env=clean_env(**{"FL_PATCH_PACKS": "none", "FL_PATCH_RANK_CHECK": "off", **env}),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=240,
    )


def verdicts(stdout: str) -> dict[tuple[str, str], dict]:
    return {(r["target"], r["vendor"]): r for r in json.loads(stdout)["registrations"]}


def test_check_gives_each_registration_its_verdict() -> None:
    proc = fl_patch("--check", "--json", FL_PATCH_REGISTRY="act_check_registry", MG_FL_PREFER="acme")
    assert proc.returncode == 1, proc.stderr
    found = verdicts(proc.stdout)
    level = {key: r["level"] for key, r in found.items()}
    M = "act_target.mod"
    assert level == {
        (f"{M}.greet", "default"): "ok",
        (f"{M}.greet", "renamed"): "ok",  # name= is passed on as who= (core/kinds.py renames)
        (f"{M}.greet", "narrow"): "error",
        (f"{M}.greet", "otherdefault"): "warning",
        (f"{M}.greet", "forwarding"): "ok",
        (f"{M}.Greeter.hello", "default"): "ok",
        (f"{M}.Greeter.hello", "static"): "error",
        (f"{M}.Greeter.shout", "default"): "ok",
        (f"{M}.Greeter.shout", "withself"): "error",
        (f"{M}.Greeter.make", "default"): "ok",
        (f"{M}.Greeter.loud", "default"): "ok",
        (f"{M}.Greeter", "default"): "ok",
        (f"{M}.Greeter", "notsub"): "error",
        (f"{M}.Greeter", "ctor"): "error",
        (f"{M}.LIMIT", "default"): "ok",
        (f"{M}.LIMIT", "text"): "warning",
        (f"{M}.gone", "default"): "error",
        ("act_target.nosuchmodule.run", "default"): "error",
        (f"{M}.farewell", "default"): "error",
        (f"{M}.farewell", "musa"): "skipped",
        (f"{M}.farewell", "acme"): "error",
    }
    kinds = {key[0]: r["kind"] for key, r in found.items() if r["kind"]}
    assert kinds[f"{M}.Greeter.hello"] == "method" and kinds[f"{M}.Greeter.shout"] == "staticmethod"
    assert kinds[f"{M}.Greeter.make"] == "classmethod" and kinds[f"{M}.Greeter.loud"] == "property"
    assert kinds[f"{M}.Greeter"] == "class" and kinds[f"{M}.greet"] == "function"

    def messages(target: str, vendor: str) -> str:
        return " | ".join(f["message"] for f in found[(target, vendor)]["findings"])

    assert "'name' in the target, 'who' in the impl" in messages(f"{M}.greet", "renamed")
    assert "default of 'punctuation' differs" in messages(f"{M}.greet", "otherdefault")
    assert "does not subclass" in messages(f"{M}.Greeter", "notsub")
    assert "constructor: 'prefix' is optional in the target, required in the impl" in messages(f"{M}.Greeter", "ctor")
    assert "receives self), the impl a staticmethod" in messages(f"{M}.Greeter.hello", "static")
    assert "has no attribute 'gone'" in messages(f"{M}.gone", "default")
    assert "No module named 'act_vendor_sdk_not_installed'" in messages(f"{M}.farewell", "acme")
    assert "not active on this machine" in found[(f"{M}.farewell", "musa")]["skipped"]
    assert found[(f"{M}.greet", "default")]["engine_status"] == "applied"  # it ran as a real run would
    assert json.loads(proc.stdout)["activation"]["ok"] is True


def test_check_exits_0_when_everything_fits_and_prints_a_table() -> None:
    proc = fl_patch("--check", FL_PATCH_REGISTRY="act_check_registry_ok")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 registration(s) checked: 0 error(s)" in proc.stdout
    assert "activation: ok" in proc.stdout


def test_check_catches_a_target_that_megatron_core_0_19_2_does_not_have() -> None:
    proc = fl_patch("--check", "--json", FL_PATCH_REGISTRY="act_check_megatron")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["megatron_core"] == "0.19.2" and report["ok"] is False
    found = verdicts(proc.stdout)
    missing = found[("megatron.core.optimizer.clip_grads.get_grad_norm_fp64", "default")]
    assert missing["level"] == "error" and not missing["target_found"]
    assert "has no attribute 'get_grad_norm_fp64' (installed megatron-core 0.19.2)" in missing["findings"][0]["message"]
    assert missing["engine_status"] == "target missing"
    wrong = found[("megatron.core.optimizer.clip_grads.get_grad_norm_fp32", "default")]
    assert wrong["level"] == "error" and wrong["signature"] == "incompatible"
    assert any("'grads_for_norm' in the target, 'grads' in the impl" in f["message"] for f in wrong["findings"])
    assert any("grad_stats_parallel_group" in f["message"] for f in wrong["findings"])
    for target in (
        "megatron.core.utils.divide",
        "megatron.core.optimizer.optimizer.MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan",
        "megatron.core.optimizer.optimizer.MegatronOptimizer._extract_common_per_param_step",
        "megatron.core.optimizer_param_scheduler.OptimizerParamScheduler",
        "megatron.core.transformer.moe.ops.paged_stash",
    ):
        assert found[(target, "default")]["level"] == "ok", found[(target, "default")]
        assert found[(target, "default")]["engine_status"] == "applied"


def test_list_shows_every_registration_without_importing_megatron() -> None:
    code = (
        "import json, sys\n"
        "from fl_patch.cli import main\n"
        "status = main(['--list', '--json'])\n"
        "print('MEGATRON' + json.dumps(sorted(m for m in sys.modules if m.startswith('megatron.'))), status)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(FL_PATCH_PACKS="cpu", FL_PATCH_REGISTRY="act_check_registry", MG_FL_PREFER="acme"),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    listing, _, tail = proc.stdout.partition("MEGATRON")
    assert tail.split() == ["[]", "0"]  # no megatron module imported, exit status 0
    entries = json.loads(listing)["registrations"]
    by_key = {(e["target"], e["vendor"]): e for e in entries}
    greet = by_key[("act_target.mod.greet", "renamed")]
    assert greet["chosen_vendor"] == "default" and greet["status"] == "other vendor chosen"
    assert set(greet["vendors"]) == {"default", "renamed", "narrow", "otherdefault", "forwarding"}
    assert greet["method_key"] == "mod.greet" and greet["impl"] == "act_check_impls.greet_renamed"
    assert by_key[("act_target.mod.farewell", "acme")]["chosen_vendor"] == "acme"
    assert by_key[("act_target.mod.Greeter.hello", "default")]["method_key"] == "Greeter.hello"
    assert any(e["source"] == "fl_patch.impls.cpu.registry" for e in entries)  # the packs are listed too
    text = subprocess.run(
        [sys.executable, "-m", "fl_patch", "--list"],
        env=clean_env(FL_PATCH_PACKS="none", FL_PATCH_RANK_CHECK="off", FL_PATCH_REGISTRY="act_check_registry_ok"),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    # The user's registrations under one heading that names where they come from; one line per target,
    # then one per vendor: the chosen one starred, its status and impl.
    lines = text.splitlines()
    assert lines[0].startswith("yours: 3 registration(s) listed, from act_check_registry_ok;"), text
    at = lines.index("act_target.mod.greet")
    assert lines[at + 1].split() == ["*", "default", "waiting", "act_check_impls.greet_ok"]
    assert "3 registration(s) for 3 target(s)" in text
    assert max(len(line) for line in lines) < 120


def test_a_target_that_names_a_re_export_is_said_with_the_target_that_reaches_megatrons_callers() -> None:
    """rotary_pos_embedding.apply_rotary_pos_emb is rope_utils' function: patching that name leaves attention.py's
    (imported from rope_utils) upstream's, so the plugin's row warns and names the defining target. A re-export
    registered together with its home, and a method of a class named where it is re-exported (the class is shared),
    are deliberate and say nothing; a shipped pack's deliberate one (the fp8 config gate) is a note, not a warning."""
    proc = fl_patch("--check", "--json", FL_PATCH_REGISTRY="act_check_reexport", FL_PATCH_PACKS="flaggems")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = verdicts(proc.stdout)
    rope = found[("megatron.core.models.common.embeddings.rotary_pos_embedding.apply_rotary_pos_emb", "default")]
    assert rope["level"] == "warning" and rope["engine_status"] == "applied", rope
    [message] = [f["message"] for f in rope["findings"] if f["level"] == "warning"]
    home = "megatron.core.models.common.embeddings.rope_utils.apply_rotary_pos_emb"
    assert message.startswith(f"a re-export of {home}: ") and message.endswith(f"To reach every caller, target {home}")
    assert "not code that reaches it through megatron.core.models.common.embeddings.rope_utils" in message
    for target in (
        "megatron.core.tensor_parallel.vocab_parallel_cross_entropy",
        "megatron.core.tensor_parallel.cross_entropy.vocab_parallel_cross_entropy",
        "megatron.core.models.gpt.GPTModel.set_input_tensor",
    ):
        assert found[(target, "default")]["level"] == "ok", found[(target, "default")]
        assert not found[(target, "default")]["findings"], found[(target, "default")]
    gate = found[("megatron.core.transformer.transformer_config.is_te_min_version", "flaggems")]
    notes = [f["message"] for f in gate["findings"] if f["level"] == "note"]
    assert any(m.startswith("a re-export of megatron.core.utils.is_te_min_version") for m in notes), gate
    assert not [f for f in gate["findings"] if f["level"] != "note" and "re-export" in f["message"]], gate
