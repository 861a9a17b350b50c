"""Impls that record what was loaded when they were imported (laziness tests)."""
