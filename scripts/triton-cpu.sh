#!/usr/bin/env bash
# Installs Triton into .cache/triton-cpu/ (gitignored) so the FlagGems pack's own
# Triton kernels can be checked on a machine with no GPU, in Triton's CPU interpreter
# (TRITON_INTERPRET=1): tests/impls/test_flaggems_interpret.py puts that folder on
# PYTHONPATH of a subprocess and skips when it is absent.
#
# Why not in .venv: with triton importable, megatron-core imports its Triton paths
# (and torch its Triton integration) in every test of the suite; only the
# interpreter subprocess should see it.
# Why numpy < 2.4 beside it: triton 3.6's interpreter converts 1-element arrays with
# int(), which numpy 2.4 refuses ("only 0-dimensional arrays can be converted"); the
# folder shadows the venv's numpy in that subprocess only.
# Idempotent: returns at once when the pinned versions are there. About 714 MB on disk
# (`du -sh .cache/triton-cpu`: triton 641 MB, numpy 73 MB). FL_PATCH_NO_TRITON=1 makes
# scripts/bootstrap.sh skip it (the interpreter tests then skip).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEST=.cache/triton-cpu
TRITON_VERSION=${FL_PATCH_TRITON_CPU:-3.6.0}
NUMPY_SPEC="numpy>=2.0,<2.4"
stamp=$DEST/.stamp
want="triton==$TRITON_VERSION $NUMPY_SPEC"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$DEST/triton" ]; then
  exit 0
fi
mkdir -p "$DEST"
"$PY" -m pip install -q --disable-pip-version-check --no-deps --upgrade --target "$DEST" \
  "triton==$TRITON_VERSION" "$NUMPY_SPEC"
echo "$want" > "$stamp"
echo "triton $TRITON_VERSION for the CPU interpreter is in $DEST"
