"""A package whose module counts how often its body runs (start-up trigger tests)."""

EXECUTIONS: list[str] = []
