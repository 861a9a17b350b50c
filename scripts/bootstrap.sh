#!/usr/bin/env bash
# Creates .venv with everything fl_patch, its tests and its demo need, from nothing.
# Idempotent: a second run with an unchanged pyproject.toml returns at once.
#
# Why not just `pip install -e .`: megatron-core >= 0.17 declares Python >= 3.12 but
# its megatron/core runs on 3.11, so it is installed with --ignore-requires-python
# after numpy and packaging (else pip tries to build numpy from source); and torch is
# pinned to the CPU build when no GPU is present (an unpinned torch pulls GBs of CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
stamp=$VENV/.fl_patch_bootstrap
want=$(cat pyproject.toml scripts/bootstrap.sh scripts/triton-cpu.sh | sha256sum | cut -c1-16)
# The check reads installed versions only: importing megatron.core without fl_patch fails on
# a CPU-only torch (no triton), and importing torch costs a second on every run.
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$VENV/bin/python" -c \
  "import importlib.metadata as m; [m.version(d) for d in ('torch', 'megatron-core', 'fl-patch', 'pytest', 'ray')]" \
  2>/dev/null; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" --upgrade pip >/dev/null 2>&1 || true
torch_version=${FL_PATCH_TORCH:-2.13.0}
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
    "${pip[@]}" "torch==$torch_version"
  elif [ "$(uname -s)" = Linux ]; then
    # No GPU: the CPU build, asked for by name (+cpu) from PyTorch's CPU index. PyPI's Linux
    # torch is the CUDA build (GBs of CUDA libraries and triton, useless here). PyPI stays
    # an extra index for torch's own dependencies (sympy, networkx, ...).
    # The configured indexes and find-links come first: where they hold the CPU build
    # (a mirror, a wheel cache) this needs no network and does not wait on retries to an
    # unreachable download.pytorch.org; PyPI itself has no +cpu builds, so there it fails
    # at once and the CPU index is asked.
    "${pip[@]}" "torch==$torch_version+cpu" 2>/dev/null || "${pip[@]}" "torch==$torch_version+cpu" \
      --index-url "${FL_PATCH_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" --extra-index-url https://pypi.org/simple
  else
    "${pip[@]}" "torch==$torch_version"  # macOS, Windows: PyPI's build is the CPU one
  fi
fi
"${pip[@]}" numpy "packaging>=24.2"
"${pip[@]}" --ignore-requires-python "megatron-core==${FL_PATCH_MEGATRON_CORE:-0.19.2}"
# ray: tests/job/test_ray.py runs fl_patch's Ray support on a local Ray cluster (the job's extra).
"${pip[@]}" --ignore-requires-python -e ".[test,train,ray]"
# Wheels of other supported megatron-core releases, for `--check --against` in the tests
# (tests/diagnostics/test_drift.py): downloaded, never installed (2 MB each).
mkdir -p .cache/wheels
for v in ${FL_PATCH_AGAINST_WHEELS:-0.17.1 0.18.2}; do
  ls .cache/wheels/megatron_core-"$v"-*.whl >/dev/null 2>&1 \
    || "$VENV/bin/python" -m pip download -q --no-deps --ignore-requires-python -d .cache/wheels "megatron-core==$v"
done
# Open MPI's mpirun, for the test that runs fl_patch's rank check under it (tests/job/test_launchers.py; it skips
# without). Best effort, and only where this script runs as root with apt (CI, the dev machines): Debian's
# openmpi-bin. FL_PATCH_NO_MPI=1 skips it.
if [ -z "${FL_PATCH_NO_MPI:-}" ] && ! command -v mpirun >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
  && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openmpi-bin; } \
    >/dev/null 2>&1 || echo "bootstrap: openmpi-bin not installed (the mpirun test will skip)" >&2
fi
# Triton for the FlagGems pack's kernels in Triton's CPU interpreter, kept out of .venv
# (see the script); the interpreter tests skip without it. FL_PATCH_NO_TRITON=1 skips it.
if [ -z "${FL_PATCH_NO_TRITON:-}" ]; then
  PYTHON="$VENV/bin/python" bash scripts/triton-cpu.sh
fi
echo "$want" > "$stamp"
