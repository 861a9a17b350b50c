"""Introspection: ``--check``, ``--list``, signature comparison, the report at exit."""
