"""Impls for megatron's own idioms (issue 43): base classes, ``super(Name, self)``, autograd Functions."""
