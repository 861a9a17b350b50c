"""An impl module whose import is interrupted (Ctrl-C arrives while it loads)."""

raise KeyboardInterrupt


def patched(*args: object, **kwargs: object) -> str:  # never reached
    return "interrupts_at_import"
