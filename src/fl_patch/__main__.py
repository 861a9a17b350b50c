"""``python -m fl_patch [options] script.py args...`` (see ``fl_patch.cli``)."""

from fl_patch.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
