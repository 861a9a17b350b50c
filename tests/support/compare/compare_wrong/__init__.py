"""Deliberately wrong impls, each registered on the real megatron target it would replace: compare mode must flag each.

Used by ``tests/compare/test_planted.py`` (``FL_PATCH_REGISTRY=compare_wrong.registry``). Every impl is what a
vendor port could plausibly get wrong: it runs, it trains, its loss goes down, and it is wrong.
"""
