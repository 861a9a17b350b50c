"""The patch index (``python -m fl_patch.impls.index``, ``docs/patches.md``): every registration of every pack,
each with its PatchDoc's four fields, and the file up to date."""

from __future__ import annotations

import json

from fl_patch.impls import PACKS, SHARED_PACKS

from ..conftest import REPO, clean_env

FIELDS = ("why", "how", "upstream", "remove_when")

# Every registration fl_patch loads in a real process: the packs (and fl_patch's own rank check) through the
# engine's own loading path, at the first megatron import.
LOADED = """
import json, fl_patch
fl_patch.install()
import megatron.core
print("RESULT" + json.dumps([[r.target, r.vendor, r.source] for r in fl_patch.report()]))
"""


def _index(run_python) -> list[dict]:
    return json.loads(run_python("-m", "fl_patch.impls.index", "--json", env=clean_env()).stdout)


def _loaded(run_python, **env: str) -> set[tuple[str, str]]:
    out = run_python("-c", LOADED, env=clean_env(**env), timeout=300).stdout
    rows = json.loads(out.rsplit("RESULT", 1)[1])
    return {
        (target, vendor) for target, vendor, source in rows if source.startswith(("fl_patch.impls.", "fl_patch.job."))
    }


def test_every_registration_of_every_pack_has_its_four_fields(run_python) -> None:
    entries = _index(run_python)
    assert {entry["pack"] for entry in entries} == {*PACKS, *SHARED_PACKS, "fl_patch itself"}
    empty = [
        (entry["target"], entry["vendors"], field)
        for entry in entries
        for field in FIELDS
        if not isinstance(entry[field], str) or not entry[field].strip()
    ]
    assert not empty, empty
    # the shared packs are registered by the packs that build on them, for those packs' vendors only
    for entry in entries:
        if entry["pack"] in SHARED_PACKS:
            assert entry["included_by"] == ["cpu", "flaggems"] and entry["vendors"] == ["cpu", "flaggems"], entry
        elif entry["pack"] in PACKS:
            assert entry["vendors"] == [{"cuda_on_cpu": "cpu"}.get(entry["pack"], entry["pack"])], entry


def test_the_index_lists_exactly_what_a_real_process_loads_here(run_python) -> None:
    """Every condition holds on this machine (no TE, no Apex, Python 3.11, the transfer on): all rows load; with the
    transfer off (FL_PATCH_CUDA_ON_CPU=0) exactly the rows under CUDA_ON_CPU_ON do not."""
    entries = _index(run_python)
    rows = {(entry["target"], vendor): entry["conditions"] for entry in entries for vendor in entry["vendors"]}
    assert _loaded(run_python) == set(rows)
    assert _loaded(run_python, FL_PATCH_CUDA_ON_CPU="0") == {
        key for key, c in rows.items() if "CUDA_ON_CPU_ON" not in c
    }


def test_docs_patches_md_is_what_the_generator_writes(run_python) -> None:
    proc = run_python("-m", "fl_patch.impls.index", "--check", env=clean_env(), check=False)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    text = (REPO / "docs" / "patches.md").read_text()
    assert text.count("- **Why**: ") == text.count("- **Remove when**: ") > 100
    assert "No PatchDoc" not in text
