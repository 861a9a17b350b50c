"""The bootstrap directory ``python -m fl_patch`` prepends to ``PYTHONPATH``.

It holds only ``sitecustomize.py`` (a copy of ``sitecustomize_template/sitecustomize.py``),
so every Python process started below the launcher, with this directory on its
``PYTHONPATH``, activates fl_patch at start-up. This ``__init__`` exists so the
directory ships inside the package; it is never imported at start-up.
"""
