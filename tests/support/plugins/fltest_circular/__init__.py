"""A circular import megatron's own import path did not show: ``a`` defines ``f``,
then imports ``b``, which binds ``f`` by name while ``a`` is still executing."""
