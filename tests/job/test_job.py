"""fl_patch.job, in process: per-rank merge, launcher rank variables, a rank's patch state, the rank check's protocol.

The protocol runs for real: members are threads sharing one real ``torch.distributed.TCPStore``
(a server on a free localhost port), as ranks share their job's store. The launchers
themselves run in ``tests/job/test_launchers.py`` and ``tests/job/test_ray.py``.
"""

from __future__ import annotations

import json
import sys
import threading
import types
from pathlib import Path

import pytest

from fl_patch.config.settings import Settings, malformed_values, rank_check_mode, rank_check_timeout
from fl_patch.core.records import PatchRecord, Status
from fl_patch.host.ranks import is_elastic_agent, process_rank
from fl_patch.job import merge as job_merge
from fl_patch.job.digest import PatchState, impl_file, state_rows
from fl_patch.job.rank_check import CheckFailed, check_group

# ------------------------------------------------------------------ merge


def test_rank_ranges_compress_runs_and_keep_labels() -> None:
    assert job_merge.rank_ranges([3, 0, 1, 2, 5, 7, 8]) == "ranks 0-3,5,7-8"
    assert job_merge.rank_ranges([4]) == "rank 4"
    assert job_merge.rank_ranges([1, "pid 42"]) == "ranks 1,pid 42"


def test_merge_gives_shared_rows_once_and_differences_per_rank() -> None:
    rows = job_merge.merge(
        {
            0: {"torch": "2.13", "a.f": "cpu x"},
            1: {"torch": "2.13", "a.f": "cpu x"},
            2: {"torch": "2.13", "a.f": "cuda y"},
            3: {"torch": "2.13"},
        }
    )
    by_key = {row.key: row for row in rows}
    assert by_key["torch"].same and by_key["torch"].values == [("2.13", (0, 1, 2, 3))]
    assert not by_key["a.f"].same
    assert by_key["a.f"].values == [("cpu x", (0, 1)), ("cuda y", (2,))] and by_key["a.f"].missing == (3,)
    text = "\n".join(job_merge.format_merged(rows, show_same=True))
    assert text.count("2.13") == 1  # once, not per rank
    assert "ranks 0-1" in text and "rank 2" in text and "rank 3" in text and "(no such row)" in text


def _entry(rank: object, pid: int, status: str, vendor: str, calls: int | None) -> dict[str, object]:
    record = PatchRecord("m.f", "m.f", vendor, f"impl_{vendor}", Status(status), chosen_vendor=vendor, calls=calls)
    waiting = PatchRecord("m.g", "m.g", "cpu", "impl_g", Status.WAITING, chosen_vendor="cpu")
    return {"pid": pid, "rank": rank, "records": [record.as_dict(), waiting.as_dict()]}


def test_merged_report_is_one_view_with_the_odd_rank_named() -> None:
    entries = [
        _entry("0", 10, "applied", "cpu", 5),
        _entry("1", 11, "applied", "cpu", 5),
        _entry("2", 12, "applied", "cuda", 5),
        {"pid": 9, "rank": None, "records": [PatchRecord("m.f", "m.f", "cpu", "x", Status.WAITING).as_dict()]},
    ]
    text = job_merge.merge_reports(entries, width=200)  # (wide: the test reads whole lines)
    assert text.startswith(
        "fl_patch report, merged over 3 process(es) (ranks 0-2; 1 more imported no registered target)"
    )
    assert "1 differ" in text
    assert "ranks 0-1: applied cpu -> impl_cpu" in text and "rank 2: applied cuda -> impl_cuda" in text
    assert "never triggered on any process: m.g" in text
    same = job_merge.merge_reports(entries[:2])
    assert "0 differ" in same and same.count("impl_cpu") == 1 and "calls: 5 each" in same


def test_merge_command_reads_report_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "r.jsonl"
    report.write_text("".join(json.dumps(_entry(str(r), 10 + r, "applied", "cpu", r)) + "\n" for r in range(3)))
    assert job_merge.main([str(report)]) == 0
    out = capsys.readouterr().out
    assert "merged over 3 process(es) (ranks 0-2)" in out and "calls: 0 (rank 0), 1 (rank 1), 2 (rank 2)" in out
    assert job_merge.main([]) == 2


def test_report_lines_skip_what_is_not_an_entry() -> None:
    lines = ["", "not json", json.dumps({"pid": 1, "rank": "0", "records": []}), json.dumps([1, 2])]
    assert [e["pid"] for e in job_merge.read_report_lines(lines)] == [1]


# ------------------------------------------------------------------ ranks


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "SLURM_PROCID": "0"}, (3, 8, 1, "RANK")),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1"}, (5, 16, 1, "SLURM_PROCID")),
        ({"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4"}, (2, 4, None, "OMPI_COMM_WORLD_RANK")),
        ({"PMI_RANK": "1", "PMI_SIZE": "2"}, (1, 2, None, "PMI_RANK")),
        ({"RANK": "x", "PMIX_RANK": "7"}, (7, None, None, "PMIX_RANK")),
        ({}, (None, None, None, None)),
    ],
)
def test_process_rank_reads_each_launchers_variables(environ: dict[str, str], expected: tuple[object, ...]) -> None:
    info = process_rank(environ)
    assert (info.rank, info.world, info.local_rank, info.source) == expected


def test_rank_label_names_the_variable_when_it_is_not_rank() -> None:
    assert process_rank({"SLURM_PROCID": "5", "SLURM_NTASKS": "16"}).label() == "rank 5 of 16 (SLURM_PROCID)"
    assert process_rank({"RANK": "1", "WORLD_SIZE": "2"}).label() == "rank 1 of 2"


def test_torchruns_agent_is_told_from_its_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent has loaded torch elastic's agent and has no rank; a rank (RANK set) is a rank even if it has."""
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK"):
        monkeypatch.delenv(name, raising=False)
    agent = "torch.distributed.elastic.agent.server.local_elastic_agent"
    monkeypatch.delitem(sys.modules, agent, raising=False)
    assert not is_elastic_agent()
    monkeypatch.setitem(sys.modules, agent, types.ModuleType(agent))
    assert is_elastic_agent()
    monkeypatch.setenv("RANK", "0")
    assert not is_elastic_agent()


# ------------------------------------------------------------------ settings


def test_rank_check_settings_and_their_bad_values() -> None:
    assert rank_check_mode({}) == ("on", None)
    assert rank_check_mode({"FL_PATCH_RANK_CHECK": "WARN"})[0] == "warn"
    assert rank_check_mode({"FL_PATCH_RANK_CHECK": "0"})[0] == "off"
    mode, message = rank_check_mode({"FL_PATCH_RANK_CHECK": "loud"})
    assert mode == "on" and message is not None and "'loud'" in message
    assert rank_check_timeout({"FL_PATCH_RANK_CHECK_TIMEOUT": "2.5"}) == (2.5, None)
    value, message = rank_check_timeout({"FL_PATCH_RANK_CHECK_TIMEOUT": "-1"})
    assert value == 300.0 and message is not None
    settings = Settings.from_environ({"FL_PATCH_RANK_CHECK": "off", "FL_PATCH_RANK_CHECK_TIMEOUT": "7"})
    assert (settings.rank_check, settings.rank_check_timeout) == ("off", 7.0)
    assert any("FL_PATCH_RANK_CHECK_TIMEOUT" in m for m in malformed_values({"FL_PATCH_RANK_CHECK_TIMEOUT": "soon"}))


# ------------------------------------------------------------------ a rank's state


def test_state_rows_hold_vendor_impl_and_source_hash_not_application_order(tmp_path: Path) -> None:
    plugin = tmp_path / "jobrows_plugin.py"
    plugin.write_text("def f():\n    return 1\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert impl_file("jobrows_plugin.f") == str(plugin)  # found without importing it
        assert "jobrows_plugin" not in sys.modules
        applied = PatchRecord("m.f", "m.f", "cpu", "jobrows_plugin.f", Status.APPLIED, chosen_vendor="cpu")
        waiting = PatchRecord("m.f", "m.f", "cpu", "jobrows_plugin.f", Status.WAITING, chosen_vendor="cpu")
        other = PatchRecord("m.f", "m.f", "cuda", "cuda_impl.f", Status.OTHER_VENDOR, chosen_vendor="cpu")
        settings = Settings()
        rows = state_rows([applied, other], settings)
        assert rows["m.f"].startswith("cpu jobrows_plugin.f @") and len(rows["m.f"].split("@")[1]) == 12
        # applied on one rank, still waiting for its module on another: the same state
        assert PatchState(rows).digest == PatchState(state_rows([waiting, other], settings)).digest
        plugin.write_text("def f():\n    return 2\n")  # another version of the plugin's file
        from fl_patch.job import digest

        digest._HASHES.clear()
        digest._FILES.clear()
        assert state_rows([applied], settings)["m.f"] != rows["m.f"]
        disabled = PatchRecord("m.f", "m.f", "cpu", "x", Status.DISABLED, chosen_vendor="cpu")
        assert state_rows([disabled], settings)["m.f"] == "disabled"
        strict = state_rows([], Settings(strict=True))
        assert strict["strict"] == "on" and state_rows([], settings)["strict"] == "off"
    finally:
        sys.path.remove(str(tmp_path))


# ------------------------------------------------------------------ the protocol, over a real TCP store


def _run_members(states: dict[int, PatchState], members: list[int], timeout_s: float = 20.0) -> dict[int, object]:
    import torch.distributed as dist

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    # A client each, as each rank has its own (one client's blocking wait holds its connection).
    clients = {rank: dist.TCPStore("127.0.0.1", server.port, is_master=False) for rank in states}
    results: dict[int, object] = {}

    def member(rank: int) -> None:
        try:
            check_group(clients[rank], "default", members, rank, states[rank], timeout_s, prefix="t/")
            results[rank] = "ok"
        except CheckFailed as failure:
            results[rank] = failure

    threads = [threading.Thread(target=member, args=(rank,)) for rank in states]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_members_with_one_state_pass() -> None:
    state = PatchState({"torch version": "2.13", "m.f": "cpu x @1"})
    assert _run_members({r: state for r in range(4)}, [0, 1, 2, 3]) == {r: "ok" for r in range(4)}


def test_a_rank_with_another_impl_stops_every_member_with_one_table() -> None:
    same = PatchState({"torch version": "2.13", "m.f": "cpu x @1"})
    odd = PatchState({"torch version": "2.13", "m.f": "cuda y @2"})
    results = _run_members({0: same, 1: same, 2: odd}, [0, 1, 2])
    assert all(isinstance(r, CheckFailed) for r in results.values()), results
    lead = results[0]
    assert isinstance(lead, CheckFailed) and lead.lead
    assert "m.f: differs" in lead.message and "ranks 0-1  cpu x @1" in lead.message and "rank 2" in lead.message
    assert "torch version" not in lead.message  # a row every rank agrees on is not in the table
    for rank in (1, 2):
        other = results[rank]
        assert isinstance(other, CheckFailed) and not other.lead
        assert "rank 0's output has the table" in other.message and "m.f" in other.message


def test_a_rank_that_never_comes_is_named_after_the_timeout() -> None:
    state = PatchState({"m.f": "cpu x @1"})
    results = _run_members({0: state, 1: state}, [0, 1, 2], timeout_s=1.0)
    lead = results[0]
    assert isinstance(lead, CheckFailed) and lead.lead
    assert "rank 2 of the process group 'default' (3 ranks) did not take part" in lead.message
    assert "ranks 0-1 did" in lead.message and "fl_patch is not active there" in lead.message


def test_the_exit_report_goes_through_the_store_only_in_a_job_of_several_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that makes a group of world size 1 (the demo does) has nothing to merge: its own report, not
    "merged over 1 process(es)... on every one, 0 differ"; a group of two sends its report through the store."""
    from fl_patch.job import rank_check
    from fl_patch.job.report import JobReport
    from fl_patch.runtime import RUNTIME

    monkeypatch.setattr(RUNTIME, "settings", types.SimpleNamespace(report_at_exit=True, report_file=None))
    monkeypatch.setattr(RUNTIME, "report_sink", None)
    rank_check._attach_report(object(), 0, 1)
    assert RUNTIME.report_sink is None
    rank_check._attach_report(object(), 0, 2)
    assert isinstance(RUNTIME.report_sink, JobReport) and RUNTIME.report_sink.world == 2
