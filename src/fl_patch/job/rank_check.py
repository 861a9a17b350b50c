"""One patch set per job, checked: every rank of a process group compares its patch state as the group is created.

One rank running a vendor's kernel and another running upstream's gives wrong gradients,
or a hang in a collective, and nothing says why. So when a process group is created, each
member publishes the digest of its patch state (``digest.py``) in the group's store, waits
for the others, and compares: the same digest on every member, and the creation returns;
different ones, and every member stops right there (``FlPatchError`` out of
``init_process_group`` / ``new_group``), before the model's first collective, the lowest
rank with one table of the rows that differ and the ranks that have each value
(``merge.py``), the others with one line that points at it. A member that never takes part
within ``FL_PATCH_RANK_CHECK_TIMEOUT`` seconds (default 300) is named: fl_patch is not
active there (a node whose environment lacks the bootstrap, ``FL_PATCH=0``, another
interpreter), or it died. ``FL_PATCH_RANK_CHECK=warn`` makes either a warning, ``=off``
leaves the check out.

**Where it hooks.** fl_patch's own registration (``job/registry.py``, loaded with the packs
at the first megatron import) on ``torch.distributed.distributed_c10d._new_process_group_helper``,
the one function that creates every process group: ``init_process_group``'s default group,
``new_group``, ``new_subgroups``, device meshes. torch calls it through its module's
globals, so a program that bound ``init_process_group`` or ``new_group`` before fl_patch
installed (``from torch.distributed import init_process_group``) is still seen, and the
CUDA-on-CPU transfer's own patches on ``init_process_group`` / ``new_group`` (which turn
``nccl`` into ``gloo``) are left alone, since a target takes one vendor's impl. A public
hook would be better; torch has none for group creation.

**What is compared, with whom.** The members of the group being created, through the store
torch itself gives the group (the default group's: torchrun's, ``env://``'s TCP store,
``file://``, the one Ray workers rendezvous through), under keys of their own
(``fl_patch/rank_check/<restart>/<group>#<n>/``: a torch elastic restart, a group destroyed
and created again, never see an earlier check's keys). Non-members of a new group take no
part. A program that created its default group before its first megatron import
(before fl_patch installed there) has that group checked at its first new group that every
rank creates (megatron's ``initialize_model_parallel`` is one), among all ranks.
The MPI backend has no store: not checked.

**What it costs.** Five small store operations per member and group (a digest, not the
rows: those are sent only when the digests differ), and the wait for the slowest member
(``bench/rank_check.py``; numbers in docs/activation.md).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import socket
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import fl_patch
from fl_patch.config.settings import ENV, Settings
from fl_patch.core.errors import FlPatchError, warn
from fl_patch.job.digest import PatchState, patch_state
from fl_patch.job.merge import format_merged, merge, rank_ranges
from fl_patch.runtime import RUNTIME

__all__ = ["TARGET", "CheckFailed", "check_group", "new_process_group_helper"]

TARGET = "torch.distributed.distributed_c10d._new_process_group_helper"
KEY_ROOT = "fl_patch/rank_check"


class CheckFailed(Exception):
    """The check found a difference (or a missing rank): ``message`` for this rank, ``lead`` if it is the one with the table.

    ``done`` is the store key the lead sets once it has printed the table: the other ranks wait
    for it (briefly) before they stop, so that a launcher that ends every rank as soon as one
    fails (torchrun) does not end the lead before it has said what differs.
    """

    def __init__(self, message: str, lead: bool, store: Any = None, done: str = "", summary: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.summary = summary or message.splitlines()[0]
        self.lead = lead
        self.store = store
        self.done = done


# How long a rank waits for the lead's table before it stops anyway.
TABLE_WAIT_S = 10.0


class _State:
    """What this process remembers between group creations."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.occurrences: dict[str, int] = {}  # group label -> checks so far (a name reused after destroy)
        self.default_checked = False
        self.signature: inspect.Signature | None = None
        self.bug_said = False


_STATE = _State()


def _settings() -> Settings:
    return RUNTIME.settings if RUNTIME.settings is not None else Settings.from_environ()


def _key_prefix(label: str) -> str:
    with _STATE.lock:
        n = _STATE.occurrences.get(label, 0) + 1
        _STATE.occurrences[label] = n
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"{KEY_ROOT}/{restart}/{label}#{n}/"


def _decode(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def check_group(
    store: Any,
    label: str,
    members: Sequence[int],
    me: int,
    state: PatchState,
    timeout_s: float,
    *,
    prefix: str | None = None,
) -> None:
    """Compare ``state`` with every member's through ``store``; raise ``CheckFailed`` if they differ or one is missing.

    ``members``: the global ranks of the group; ``me``: this process's global rank among them.
    Every member calls this with the same ``label`` in the same order (group creation is
    collective), so the keys match (``prefix`` gives the keys' prefix instead).
    """
    prefix = prefix or _key_prefix(label)
    size = len(members)
    me_info = json.dumps({"digest": state.digest, "host": socket.gethostname(), "pid": os.getpid()})
    store.set(f"{prefix}rank/{me}", me_info)
    store.add(f"{prefix}digest/{state.digest}", 1)
    if store.add(f"{prefix}arrived", 1) == size:
        store.set(f"{prefix}complete", "1")
    if not _wait(store, f"{prefix}complete", timeout_s):
        present = [m for m in members if store.check([f"{prefix}rank/{m}"])]
        missing = [m for m in members if m not in present]
        if not missing:  # every member wrote its key, yet the count never completed: not a verdict on any rank
            raise RuntimeError(f"the rank check's wait timed out after {timeout_s:g} s with every member present")
        lead = bool(present) and me == min(present)
        message = _missing_message(label, members, present, missing, timeout_s)
        summary = (
            f"fl_patch: {rank_ranges(missing)} of the {_group_text(label, size)} did not take part in the rank check"
        )
        raise CheckFailed(message, lead, store, f"{prefix}told", summary)
    if store.add(f"{prefix}digest/{state.digest}", 0) == size:
        return  # every member has this digest: five small store operations, no state sent
    # They differ: now each member sends its rows (a few KB), so that every member can say which differ.
    if not store.check([f"{prefix}state/{state.digest}"]):
        store.set(f"{prefix}state/{state.digest}", state.to_json())
    if store.add(f"{prefix}stated", 1) == size:
        store.set(f"{prefix}stated_all", "1")
    _wait(store, f"{prefix}stated_all", timeout_s)  # every member is past 'complete': only a death delays this
    infos = {m: json.loads(_decode(store.get(f"{prefix}rank/{m}"))) for m in members}
    digests = {i["digest"] for i in infos.values()}
    states = {
        d: PatchState.from_json(store.get(f"{prefix}state/{d}")) for d in digests if store.check([f"{prefix}state/{d}"])
    }
    summary = f"fl_patch: the ranks of the {_group_text(label, size)} do not run the same patches"
    message = _mismatch_message(label, members, me, infos, states)
    raise CheckFailed(message, me == min(members), store, f"{prefix}told", summary)


def _wait(store: Any, key: str, timeout_s: float) -> bool:
    """Whether ``key`` was set within ``timeout_s`` (torch raises its DistStoreError, a RuntimeError, on timeout)."""
    try:
        store.wait([key], timedelta(seconds=timeout_s))
    except RuntimeError:
        return False
    return True


def _group_text(label: str, size: int) -> str:
    return f"process group {label!r} ({size} ranks)"


def _missing_message(
    label: str, members: Sequence[int], present: list[int], missing: list[int], timeout_s: float
) -> str:
    return (
        f"fl_patch: {rank_ranges(missing)} of the {_group_text(label, len(members))} did not take part in fl_patch's "
        f"rank check within {timeout_s:g} s ({rank_ranges(present)} did): fl_patch is not active there (that node's "
        "environment lacks the bootstrap on PYTHONPATH, FL_PATCH=0, an interpreter without fl_patch, a Ray worker "
        "without fl_patch's runtime_env), or it died or hangs before creating the group; "
        f"its patches cannot be compared ({ENV.RANK_CHECK_TIMEOUT} sets the wait)"
    )


def _mismatch_message(
    label: str, members: Sequence[int], me: int, infos: dict[int, dict[str, Any]], states: dict[str, PatchState]
) -> str:
    per_rank = {m: states[infos[m]["digest"]].rows for m in members if infos[m]["digest"] in states}
    rows = merge(per_rank)
    differ = [row for row in rows if not row.same]
    if me != min(members):
        mine = [row.key for row in differ]
        return (
            f"fl_patch: the ranks of the {_group_text(label, len(members))} do not run the same patches "
            f"({len(differ)} row(s) differ: {', '.join(mine[:3])}{', ...' if len(mine) > 3 else ''}); "
            f"rank {min(members)}'s output has the table"
        )
    by_digest: dict[str, list[int]] = {}
    for m in members:
        by_digest.setdefault(infos[m]["digest"], []).append(m)
    largest = max(by_digest.values(), key=len)
    odd = [m for m in members if m not in largest]
    where = "; ".join(f"rank {m}: {infos[m]['host']} pid {infos[m]['pid']}" for m in odd[:16])
    lines = [
        f"fl_patch: the ranks of the {_group_text(label, len(members))} do not run the same patches "
        f"({len(differ)} row(s) differ, {len(rows) - len(differ)} agree); checked as the group was created, "
        "before any collective on it:",
        *format_merged(rows, show_same=False, missing_text="(not registered there)"),
        f"  where: {where}" + ("; ..." if len(odd) > 16 else ""),
        f"({ENV.RANK_CHECK}=warn makes this a warning, =off leaves the check out)",
    ]
    return "\n".join(lines)


def _report(failure: CheckFailed, mode: str) -> None:
    if mode == "warn":
        warn(failure.message, where=("<fl_patch rank check>", 0))
        return
    # The lowest rank prints the table (once for the job), the others wait until it has; each stops with an error.
    if failure.lead:
        stream = sys.stderr
        if stream is not None:
            stream.write(failure.message + "\n")
            stream.flush()
        with contextlib.suppress(Exception):
            failure.store.set(failure.done, "1")
        raise FlPatchError(f"{failure.summary}: the table is printed above; the job stops")
    with contextlib.suppress(Exception):
        failure.store.wait([failure.done], timedelta(seconds=TABLE_WAIT_S))
    raise FlPatchError(failure.message)


def _bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    if _STATE.signature is None:
        try:
            _STATE.signature = inspect.signature(fl_patch.original(TARGET))
        except (TypeError, ValueError, LookupError):
            return None
    try:
        return dict(_STATE.signature.bind(*args, **kwargs).arguments)
    except TypeError:
        return None


# The arguments read, by name (torch 2.13's names; inspect binds the call to them).
_EXPECTED = frozenset({"group_size", "group_rank", "global_ranks_in_group", "backend", "store", "group_name"})


def _is_global_creation(name: object) -> bool:
    """A group every rank of the default group creates: torch names those by a counter ("3"), members-only ones by a hash."""
    return str(name).isdigit()


def _after_creation(arguments: dict[str, Any], result: Any) -> None:
    settings = _settings()
    mode = settings.rank_check
    if mode == "off":
        return
    import torch.distributed as dist

    backend = str(arguments.get("backend", "")).lower()
    store = arguments.get("store")
    if backend == "mpi" or store is None:
        return
    ranks = list(arguments.get("global_ranks_in_group") or [])
    name = arguments.get("group_name")
    pg = result[0] if isinstance(result, tuple) else result
    member = pg is not None and pg is not dist.GroupMember.NON_GROUP_MEMBER
    if not ranks:  # the default group (init_process_group)
        if member:
            world = int(arguments["group_size"])
            rank = int(arguments["group_rank"])
            _checked(store, "default", list(range(world)), rank, settings, mode)
            _STATE.default_checked = True
            _attach_report(store, rank, world)
        return
    if not _STATE.default_checked and dist.is_initialized() and _is_global_creation(name):
        # The default group was created before fl_patch installed here: checked now, among all ranks.
        _STATE.default_checked = True
        world, rank = dist.get_world_size(), dist.get_rank()
        _checked(store, "default", list(range(world)), rank, settings, mode)
        _attach_report(store, rank, world)
    group_rank = arguments.get("group_rank")
    if member and group_rank is not None:
        _checked(store, f"group {name}", ranks, ranks[int(group_rank)], settings, mode)


def _checked(store: Any, label: str, members: list[int], me: int, settings: Settings, mode: str) -> None:
    try:
        check_group(store, label, members, me, patch_state(settings), settings.rank_check_timeout)
    except CheckFailed as failure:
        failed = failure
    else:
        return
    _report(failed, mode)  # outside the except block: the error is not chained to the check's own exception


def _attach_report(store: Any, rank: int, world: int) -> None:
    """In report mode, the job's exit reports are merged through this group's store (``job/report.py``).

    Not in a job of one process (a script that makes a group of world size 1): there is nothing to merge, and its
    own report says what ran without "merged over 1 process(es)... on every one, 0 differ"."""
    if world <= 1:
        return
    if RUNTIME.settings is not None and RUNTIME.settings.report_at_exit and not RUNTIME.settings.report_file:
        from fl_patch.job.report import JobReport

        RUNTIME.report_sink = JobReport(store, rank, world)


def new_process_group_helper(*args: Any, **kwargs: Any) -> Any:
    """Patch for ``torch.distributed.distributed_c10d._new_process_group_helper``: the group is created, then checked.

    Why: ranks that run different patches compute different results with nothing said
    (module docstring). How: the original creates the group; its members then compare
    their patch states through the group's store. A failure of the check itself (a bug of
    ours) is said once and never breaks group creation.
    Upstream reference: torch 2.13, ``torch/distributed/distributed_c10d.py``.
    Drop when: torch offers a hook at process-group creation.
    """
    result = fl_patch.original(TARGET)(*args, **kwargs)
    try:
        arguments = _bind(args, kwargs)
        if arguments is None or not _EXPECTED <= set(arguments):
            raise TypeError(
                f"this torch's {TARGET} does not take the arguments it is read by ({', '.join(sorted(_EXPECTED))})"
            )
        _after_creation(arguments, result)
    except FlPatchError:
        raise
    except Exception as exc:  # noqa: BLE001  (a bug of the check must not break a job that did not fail it)
        if not _STATE.bug_said:
            _STATE.bug_said = True
            warn(
                f"fl_patch: the rank check could not run, ranks are not compared: {type(exc).__name__}: {exc}",
                where=("<fl_patch rank check>", 0),
            )
    return result
