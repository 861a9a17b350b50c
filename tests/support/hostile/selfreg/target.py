def f() -> str:
    return "upstream"


# The framework loads its plugins at import, after defining f: the plugin registers a
# replacement for f while this module is still importing.
from hostile.selfreg import registry  # noqa: E402, F401
