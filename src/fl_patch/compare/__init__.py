"""Compare mode: prove each patch computes what upstream computes (``--compare``, ``fl-patch compare``).

One package, depending on the core only (the core never imports it):

- ``wrapper.py``: ``wrap_for_compare``, the engine's one hook; wrappers for functions, methods, classes;
- ``call.py``: one compared call (copies, the original beside the impl, outputs and gradients);
- ``factory.py``: factory classes (a ``__new__`` that builds a module of another class);
- ``capture.py``: copies of inputs, the program state a call reaches, the RNG state;
- ``guard.py``: no collective, no write into the program's tensors while the original runs;
- ``metrics.py``: errors (cosine, max absolute, max relative) and dtype-aware verdicts;
- ``results.py``, ``table.py``: per-target results, the table at exit, the JSON records and their merge;
- ``mode.py``: turning compare mode on in a process (the hook, the exit table, the step observer);
- ``steps.py``, ``run.py``: the whole-run compare (``fl-patch compare --baseline ...``).

Nothing here is imported unless ``FL_PATCH_COMPARE`` (``--compare``) or ``fl-patch compare`` asks for it.
"""
