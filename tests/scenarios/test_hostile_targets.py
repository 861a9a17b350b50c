"""Hostile targets: a slot or a NamedTuple field named as a target is storage, not code.

From the issue "What real programs do to an import hook". ``Point.x`` of a class with
``__slots__`` is the member descriptor holding every instance's ``x``; ``Caller.message``
of megatron-core's ``rerun_state_machine.Caller`` (a NamedTuple) is the accessor of
tuple field 0. Replacing either with a function breaks every instance of the class,
and today it is reported 'applied'. Expected: refused, upstream untouched, one
``FlPatchWarning`` naming the target (strict: ``FlPatchError``).
"""

from __future__ import annotations

import warnings

import pytest

import fl_patch
from fl_patch import FlPatchError, FlPatchWarning, Status

CALLER_MESSAGE = "megatron.core.rerun_state_machine.Caller.message"
POINT_X = "hostile.slots.Point.x"


def _install_collecting_warnings() -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fl_patch.install()
    return [str(w.message) for w in caught if issubclass(w.category, FlPatchWarning)]


def test_a_slot_target_is_refused_not_reported_applied(engine) -> None:
    """Bullet: slot targets replaced and reported applied.

    Expected: Point.x stays the member descriptor (instances still store x), report() does
    not say 'applied', and exactly one FlPatchWarning names the target.
    """
    from hostile.slots import Point

    slot = vars(Point)["x"]
    fl_patch.register(POINT_X, "hostile.impls.patched")
    messages = _install_collecting_warnings()
    try:
        assert vars(Point)["x"] is slot, "the slot descriptor was replaced"
        assert Point(1, 2).x == 1
        (record,) = fl_patch.report()
        assert record.status is not Status.APPLIED, record
        assert len([m for m in messages if POINT_X in m]) == 1, messages
    finally:
        fl_patch.uninstall()
    assert vars(Point)["x"] is slot


def test_a_slot_target_fails_a_strict_install(engine, monkeypatch) -> None:
    """Bullet: slot targets, strict mode. Expected: FlPatchError naming the target; the slot untouched."""
    from hostile.slots import Point

    slot = vars(Point)["x"]
    fl_patch.register(POINT_X, "hostile.impls.patched")
    monkeypatch.setenv("FL_PATCH_STRICT", "1")
    try:
        with pytest.raises(FlPatchError, match=POINT_X.replace(".", r"\.")):
            fl_patch.install()
        assert vars(Point)["x"] is slot
    finally:
        fl_patch.uninstall()


def test_a_namedtuple_field_target_is_refused_not_reported_applied(megatron_core, engine) -> None:
    """Bullet: NamedTuple-field targets replaced and reported applied.

    megatron.core.rerun_state_machine.Caller is a NamedTuple (message: str, rank: int).
    Expected: Caller.message stays the field accessor (Caller('m', 0).message == 'm'),
    report() does not say 'applied', and exactly one FlPatchWarning names the target.
    """
    from megatron.core.rerun_state_machine import Caller

    field = vars(Caller)["message"]
    fl_patch.register(CALLER_MESSAGE, "hostile.impls.patched")
    messages = _install_collecting_warnings()
    try:
        assert vars(Caller)["message"] is field, "the NamedTuple field accessor was replaced"
        assert Caller("m", 0).message == "m"
        (record,) = fl_patch.report()
        assert record.status is not Status.APPLIED, record
        assert len([m for m in messages if CALLER_MESSAGE in m]) == 1, messages
    finally:
        fl_patch.uninstall()
    assert vars(Caller)["message"] is field


def test_a_namedtuple_field_target_fails_a_strict_install(megatron_core, engine, monkeypatch) -> None:
    """Bullet: NamedTuple-field targets, strict mode. Expected: FlPatchError naming the target."""
    from megatron.core.rerun_state_machine import Caller

    field = vars(Caller)["message"]
    fl_patch.register(CALLER_MESSAGE, "hostile.impls.patched")
    monkeypatch.setenv("FL_PATCH_STRICT", "1")
    try:
        with pytest.raises(FlPatchError, match=CALLER_MESSAGE.replace(".", r"\.")):
            fl_patch.install()
        assert vars(Caller)["message"] is field
    finally:
        fl_patch.uninstall()
