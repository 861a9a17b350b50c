"""Two targets whose impls are each other: a.f is replaced by b.g and b.g by a.f."""
