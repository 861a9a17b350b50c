"""A tiny upstream library for the activation tests: targets that are not megatron.

Importing it costs nothing, so tests of launching, children and sitecustomize run in
milliseconds per process where megatron is not the point.
"""
