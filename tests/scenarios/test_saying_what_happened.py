"""Saying what happened (issue 24): problems reach the user whatever filters the program set.

Generated cases: warning filters meant for other warnings (by category, module, action)
never hide or raise a FlPatchWarning; a filter naming fl_patch is obeyed. Environment
variable names one slip away from fl_patch's are named with the one meant.
"""

from __future__ import annotations

import io
import warnings
from contextlib import redirect_stderr

from hypothesis import given, settings
from hypothesis import strategies as st

from fl_patch.config.settings import KNOWN_NAMES, misspelled_names
from fl_patch.core.errors import FlPatchWarning, warn

OTHER_CATEGORIES = st.sampled_from([Warning, UserWarning, RuntimeWarning, DeprecationWarning])


@settings(max_examples=60, deadline=None)
@given(
    action=st.sampled_from(["ignore", "error"]),
    category=OTHER_CATEGORIES,
    module=st.sampled_from(["", "megatron", "tests"]),
)
def test_filters_for_other_warnings_never_hide_or_raise_ours(action: str, category: type[Warning], module: str) -> None:
    text = f"fl_patch: generated problem {action} {category.__name__} {module}"
    stderr = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, redirect_stderr(stderr):
        warnings.resetwarnings()
        warnings.filterwarnings(action, category=category, module=module)
        warn(text)  # must neither raise nor vanish
    shown = [str(w.message) for w in caught if issubclass(w.category, FlPatchWarning)] + [
        line for line in stderr.getvalue().splitlines() if text in line
    ]
    assert len([s for s in shown if text in s]) == 1, (shown, action, category, module)


def test_a_filter_naming_fl_patch_is_obeyed() -> None:
    stderr = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, redirect_stderr(stderr):
        warnings.resetwarnings()
        warnings.filterwarnings("ignore", category=FlPatchWarning)
        warn("fl_patch: silenced on purpose")
    assert not caught and "silenced on purpose" not in stderr.getvalue()


def _slip(name: str, data: st.DataObject) -> str:
    kind = data.draw(st.sampled_from(["delete", "insert", "swap", "substitute"]))
    i = data.draw(st.integers(0, len(name) - 2))
    letter = data.draw(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ_"))
    if kind == "delete":
        return name[:i] + name[i + 1 :]
    if kind == "insert":
        return name[:i] + letter + name[i:]
    if kind == "swap":
        return name[:i] + name[i + 1] + name[i] + name[i + 2 :]
    return name[:i] + letter + name[i + 1 :]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), name=st.sampled_from(KNOWN_NAMES))
def test_a_misspelled_variable_is_named_with_the_one_meant(data: st.DataObject, name: str) -> None:
    typo = _slip(name, data)
    if typo in KNOWN_NAMES:  # the slip made another real name
        return
    (message,) = misspelled_names({typo: "1", "PATH": "/bin", "HOME": "/root"})
    assert (f"sets {typo}," in message and "did you mean FL_PATCH" in message) or "did you mean MG_FL" in message
