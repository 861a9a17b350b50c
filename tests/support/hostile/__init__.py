"""Synthetic packages for the hostile-environment tests (tests/test_hostile_*.py).

Each module here shows one thing a real program does to an import hook that
megatron-core's own import path cannot show: an impl that calls ``sys.exit``, a
registry that parses argv at import, another finder, a module registered under a
second name, a slot or a cycle. The tests use real megatron-core wherever it can
show the case.
"""
