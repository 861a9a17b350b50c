"""Compare two checkpoint trees (``torch.save`` files) bit for bit; print the differences as JSON.

Run under fl_patch (a megatron checkpoint unpickles megatron objects, and megatron imports on a CPU
only with the CPU pack)::

    python -m fl_patch tests/support/oracle/oracle_compare_ckpt.py REF_DIR OTHER_DIR

Every ``*.pt`` file below ``REF_DIR`` is loaded with its twin below ``OTHER_DIR``: tensors must have
the same dtype, shape and bytes; numpy arrays the same dtype and values; mappings the same keys;
sequences the same length; anything else must compare equal (``==``), or have the same ``repr``
when it cannot be compared. Prints ``{"files": N, "differences": [...]}``; exit 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _bytes_equal(a: Any, b: Any) -> bool:
    import torch

    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    x, y = a.detach().cpu().contiguous().reshape(-1), b.detach().cpu().contiguous().reshape(-1)
    try:
        return bool(torch.equal(x.view(torch.uint8), y.view(torch.uint8)))
    except (RuntimeError, TypeError):  # a dtype that cannot be viewed as bytes
        return bool(torch.equal(x, y))


def differences(a: Any, b: Any, path: str = "", out: list[str] | None = None) -> list[str]:
    import argparse as _argparse

    import numpy as np
    import torch

    out = [] if out is None else out
    if len(out) > 50:
        return out
    if type(a) is not type(b):
        out.append(f"{path}: {type(a).__qualname__} vs {type(b).__qualname__}")
    elif isinstance(a, torch.Tensor):
        if not _bytes_equal(a, b):
            out.append(f"{path}: tensor {tuple(a.shape)} {a.dtype} differs")
    elif isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            out.append(f"{path}: ndarray differs")
    elif isinstance(a, dict):
        if set(a) != set(b):
            out.append(f"{path}: keys {sorted(map(str, set(a) ^ set(b)))[:8]} differ")
        for key in a:
            if key in b:
                differences(a[key], b[key], f"{path}/{key}", out)
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            out.append(f"{path}: length {len(a)} vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            differences(x, y, f"{path}[{i}]", out)
    elif isinstance(a, _argparse.Namespace):
        differences(vars(a), vars(b), f"{path}.", out)
    else:
        try:
            same = bool(a == b)
        except Exception:  # noqa: BLE001  (an object whose == raises: compare what it shows)
            same = repr(a) == repr(b)
        if not same and not (isinstance(a, float) and a != a and b != b):  # NaN == NaN here
            out.append(f"{path}: {a!r:.80} vs {b!r:.80}")
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ref", type=Path)
    p.add_argument("other", type=Path)
    args = p.parse_args(argv)
    found: list[str] = []
    files = sorted(args.ref.rglob("*.pt"))
    for path in files:
        rel = path.relative_to(args.ref)
        twin = args.other / rel
        if not twin.exists():
            found.append(f"{rel}: missing in {args.other}")
            continue
        a = torch.load(path, map_location="cpu", weights_only=False)
        b = torch.load(twin, map_location="cpu", weights_only=False)
        found.extend(f"{rel}{d}" for d in differences(a, b))
    extra = sorted(
        str(p.relative_to(args.other))
        for p in args.other.rglob("*.pt")
        if not (args.ref / p.relative_to(args.other)).exists()
    )
    found.extend(f"{rel}: only in {args.other}" for rel in extra)
    print(json.dumps({"files": len(files), "differences": found}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
