# fl_patch bootstrap. The one copy: sitecustomize_template/sitecustomize.py links here.
# It must parse on any Python that might inherit PYTHONPATH (old ones too: they are told
# they are out of reach instead of printing a SyntaxError), hence %-formatting and (object).
# ruff: noqa: UP004, UP031, UP036, BLE001
"""Activate fl_patch in every Python process that has this directory on ``PYTHONPATH``.

    PYTHONPATH=/path/to/sitecustomize_template:$PYTHONPATH torchrun --nproc-per-node 8 train.py

Python imports ``sitecustomize`` at start-up (``site``), before the program's first
line; every process started with this environment (torchrun workers, multiprocessing
spawn and forkserver children, subprocesses, compile workers) inherits it. This file:

1. does nothing but read ``FL_PATCH`` when it is ``0``/``false``/``no``/``off``;
2. otherwise imports ``fl_patch.activation.startup`` and arms it: fl_patch installs itself at
   the first import of a megatron module (or, when registry modules are named, at the
   program's first import), so a process that never imports megatron pays a few ms;
3. then imports the ``sitecustomize`` this one hides, if there is one (the user's, a
   distribution's), exactly as Python would have, so chaining is invisible;
4. never breaks start-up: a failure is one warning, except with ``FL_PATCH_STRICT=1``,
   where start-up stops with the message (exit status 1). An interpreter that cannot
   import fl_patch (another Python, another virtualenv) is told so at its first
   megatron import, by a warning (strict: an ImportError), not left silently unpatched.

It is written to parse on any Python, and to import only modules the interpreter has
already loaded at start-up (``os``, ``sys``).
"""

import os
import sys

_FL_PATCH_FALSE = ("0", "false", "no", "off")


def _fl_patch_flag(name, values):
    return os.environ.get(name, "").strip().lower() in values


def _fl_patch_strict():
    """Strict mode as fl_patch itself reads it (activation/settings.py ``_flag``): set, and not off.

    ``FL_PATCH_STRICT=2`` or ``=strict`` asks for strict mode too; reading only the "on"
    words here made a broken or missing fl_patch a warning exactly when strict was asked.
    """
    value = os.environ.get("FL_PATCH_STRICT", "").strip()
    return bool(value) and value.lower() not in _FL_PATCH_FALSE


def _fl_patch_strict_label():
    return "FL_PATCH_STRICT=%s" % os.environ.get("FL_PATCH_STRICT", "").strip()


class _FlPatchOutOfReach(object):
    """A ``sys.meta_path`` entry that speaks up when megatron is imported without fl_patch."""

    def __init__(self, reason):
        self.reason = reason
        self.fired = False

    def find_spec(self, fullname, path=None, target=None):
        if not self.fired and (fullname == "megatron" or fullname.startswith("megatron.")):
            self.fired = True
            message = "fl_patch cannot run in this process (pid %d, %s): %s; megatron runs here unpatched" % (
                os.getpid(),
                sys.executable,
                self.reason,
            )
            if _fl_patch_strict():
                raise ImportError(message + " (%s)" % _fl_patch_strict_label())
            import warnings

            warnings.warn(message, RuntimeWarning, stacklevel=2)
        return None

    def find_module(self, fullname, path=None):  # the import protocol of old Pythons
        self.find_spec(fullname, path)
        return None


def _fl_patch_failed(message):
    """One warning; or, in strict mode, the message and exit status 1 (SystemExit here is a fatal error)."""
    if _fl_patch_strict():
        sys.stderr.write("fl_patch: %s (%s: start-up stops)\n" % (message, _fl_patch_strict_label()))
        sys.stderr.flush()
        os._exit(1)
    import warnings

    warnings.warn("fl_patch: %s; this process runs without fl_patch" % message, RuntimeWarning, stacklevel=2)


def _fl_patch_activate(here):
    if sys.version_info < (3, 10):
        sys.meta_path.insert(
            0, _FlPatchOutOfReach("Python %d.%d is older than fl_patch needs (3.10)" % sys.version_info[:2])
        )
        return
    try:
        from fl_patch.activation.startup import activate
    except ImportError as exc:
        # Not installed for this interpreter (or a dependency is not): out of reach, said
        # where it matters, at the first megatron import. Unrelated tools stay quiet.
        sys.meta_path.insert(0, _FlPatchOutOfReach("it cannot import fl_patch (%s: %s)" % (type(exc).__name__, exc)))
        return
    except Exception as exc:  # a broken fl_patch
        _fl_patch_failed("importing fl_patch failed: %s: %s" % (type(exc).__name__, exc))
        return
    try:
        activate(here)
    except Exception as exc:  # activate() reports its own problems; this is a last resort
        _fl_patch_failed("activation failed: %s: %s" % (type(exc).__name__, exc))


_FL_PATCH_MARK = "# fl_patch bootstrap."


def _fl_patch_is_bootstrap(path):
    """Whether the file at ``path`` is a copy of this bootstrap (any version)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(_FL_PATCH_MARK)).decode("ascii", "replace") == _FL_PATCH_MARK
    except (OSError, TypeError, ValueError):
        return False


def _fl_patch_chain(here):
    """Import the ``sitecustomize`` this one hides, as Python would have without it.

    It is the first ``sitecustomize`` on ``sys.path`` that is not a copy of this bootstrap
    (the template on ``PYTHONPATH`` and the launcher's directory, or a copy in
    site-packages, would otherwise chain into each other forever), loaded under the name
    ``sitecustomize`` (so ``import sitecustomize`` gives it afterwards), exactly once.
    ``sys.path`` itself is never changed, which also keeps this file working when it is
    copied into site-packages. An exception it raises propagates, so ``site`` reports it
    exactly as it would have.
    """
    try:
        from importlib.machinery import PathFinder
    except ImportError:  # an old Python: no chaining (it is out of reach anyway)
        return
    for entry in list(sys.path):
        try:
            spec = PathFinder.find_spec("sitecustomize", [entry or os.curdir])
        except (ImportError, OSError, ValueError):
            continue
        if spec is None or spec.loader is None:
            continue
        if _fl_patch_is_bootstrap(spec.origin):
            continue  # this file, or another copy of it
        from importlib.util import module_from_spec

        module = module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            # As a failed import leaves it: no half-run module under the name.
            if sys.modules.get("sitecustomize") is module:
                del sys.modules["sitecustomize"]
            raise
        return


_FL_PATCH_CONSOLE_SCRIPT = "from fl_patch.cli import main"


def _fl_patch_is_launcher():
    """Whether this process is fl_patch's launcher (``python -m fl_patch ...``, the ``fl-patch`` script).

    Only *that* is read here, never what the launcher will do with its options: it either
    becomes the program by exec (and the new interpreter runs this file, and the user's
    ``sitecustomize``, itself) or runs something in this process, and then it finishes what
    was held back here first (``_fl_patch_finish_site``). Guessing from its options which one
    it will do ran the user's ``sitecustomize`` twice, or never.
    """
    words = list(getattr(sys, "orig_argv", None) or [])[1:]
    value_next = False
    for i, word in enumerate(words):
        if value_next:  # the value of -X or -W
            value_next = False
            continue
        if word.startswith("--") and word != "--":
            if word == "--check-hash-based-pycs":
                value_next = True
            continue
        if not word.startswith("-") or word in ("-", "--"):
            return _fl_patch_is_console_script(words[i + 1] if word == "--" and i + 1 < len(words) else word)
        letters = word[1:]
        for j, letter in enumerate(letters):
            if letter == "c":
                return False
            if letter == "m":
                module = letters[j + 1 :] or (words[i + 1] if i + 1 < len(words) else "")
                return module == "fl_patch"
            if letter in "XW":
                value_next = j == len(letters) - 1
                break
    return False


def _fl_patch_is_console_script(path):
    try:
        with open(path, "rb") as handle:
            head = handle.read(2048).decode("utf-8", "replace")
    except (OSError, TypeError, ValueError):
        return False
    return _FL_PATCH_CONSOLE_SCRIPT in head


# Set in the launcher's process: the directory of this copy, whose work is held back.
_fl_patch_held_back = None


def _fl_patch_finish_site():
    """What this file would have done at start-up, done now (the launcher runs something here).

    Activation, then the user's ``sitecustomize``, once; an exception of the latter is
    reported as ``site`` reports it (``Error in sitecustomize; ...``), never raised.
    """
    global _fl_patch_held_back
    here, _fl_patch_held_back = _fl_patch_held_back, None
    if here is None:
        return
    if not _fl_patch_flag("FL_PATCH", _FL_PATCH_FALSE):
        _fl_patch_activate(here)
    try:
        _fl_patch_chain(here)
    except Exception as err:
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(
                "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n" % (err.__class__.__name__, err)
            )


def _fl_patch_bootstrap():
    global _fl_patch_held_back
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    if _fl_patch_is_launcher():
        _fl_patch_held_back = here
        return
    if not _fl_patch_flag("FL_PATCH", _FL_PATCH_FALSE):
        _fl_patch_activate(here)
    _fl_patch_chain(here)


if __name__ == "sitecustomize":
    _fl_patch_bootstrap()
