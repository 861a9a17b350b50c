"""FlagScale-style platform selection: ``XPU=1`` means Kunlunxin; otherwise CUDA, else CPU."""

from __future__ import annotations

import os

PLATFORMS: dict[str, object] = {}
cur_platform = None


class _Platform:
    def __init__(self, name: str) -> None:
        self._name = name

    def device_name(self) -> str:
        return self._name


def _available() -> list[str]:
    names = ["cpu"]
    if os.environ.get("XPU", "") in ("1", "True", "true", "TRUE"):
        names.append("kunlunxin")
    try:
        import torch

        if torch.cuda.is_available():
            names.append("cuda")
    except ImportError:
        pass
    return names


def register_platforms() -> None:
    for name in _available():
        if name not in PLATFORMS:
            PLATFORMS[name] = _Platform(name)
            print(f"Megatron-LM-FL Platform: {name} Registered")


def get_platform() -> object:
    global cur_platform
    if cur_platform is None:
        register_platforms()
        for name in ("cuda", "kunlunxin", "cpu"):
            if name in PLATFORMS:
                cur_platform = PLATFORMS[name]
                print(f"Megatron-LM-FL Platform: {name} Selected")
                break
    return cur_platform
