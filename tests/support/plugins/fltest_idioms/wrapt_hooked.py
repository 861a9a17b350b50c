"""An instrumentation agent's way (OpenTelemetry, ddtrace): wrapt post-import hooks, then megatron.

Run under ``python -m fl_patch`` with ``fltest_idioms.functions.divide`` registered for
``megatron.core.utils.divide``: prints the result and how many calls the agent's wrapper saw.
"""

import json

import wrapt

SEEN: list[tuple[object, ...]] = []


def _trace(wrapped, instance, args, kwargs):  # type: ignore[no-untyped-def]
    SEEN.append(args)
    return wrapped(*args, **kwargs)


@wrapt.when_imported("megatron.core.utils")
def _instrument(module):  # type: ignore[no-untyped-def]
    wrapt.wrap_function_wrapper(module, "divide", _trace)


import megatron.core.utils as utils  # noqa: E402

import fl_patch  # noqa: E402

result = utils.divide(6, 3)
(record,) = [r for r in fl_patch.report() if r.target == "megatron.core.utils.divide"]
print(json.dumps({"result": result, "seen": len(SEEN), "status": record.status.value,
                  "proxy": isinstance(utils.divide, wrapt.FunctionWrapper)}))  # fmt: skip
