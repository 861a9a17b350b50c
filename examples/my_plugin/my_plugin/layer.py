"""A method upstream declares with ``@copy_signature``: ``TransformerLayer.forward(self, *args, **kwargs)``.

Upstream's own ``forward`` takes ``*args, **kwargs`` and carries the signature of
``_forward_attention`` in ``__signature__``; ``fl-patch --check`` compares the impl against
that copied signature. An impl that forwards ``*args, **kwargs`` accepts every call.
"""

from __future__ import annotations

from typing import Any

import fl_patch

TARGET = "megatron.core.transformer.transformer_layer.TransformerLayer.forward"
CALLS: list[int] = []


def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
    CALLS.append(self.layer_number)
    return fl_patch.original(TARGET)(self, *args, **kwargs)  # a method's original: call it with self
