#!/usr/bin/env bash
# Builds one venv per megatron-core version, for bench/version_matrix.py and bench/drift_validation.py.
#
# Usage: scripts/version_venvs.sh [VERSION ...]      (default: 0.17.1 0.18.2 0.19.2)
#        MAIN_SRC=/path/to/megatron-lm-tree scripts/version_venvs.sh main
# Env:   VENVS (default .cache/venvs in this checkout), TORCH (default 2.13.0), PYTHON (default python3).
#
# Each venv: torch (CPU wheel when no GPU), numpy, packaging>=24.2, megatron-core==VERSION with
# --ignore-requires-python (megatron-core >= 0.17 declares Python >= 3.12, its code runs on 3.11),
# wrapt, typing_extensions (fl_patch), psutil + pyyaml + pytest (megatron.training, the tests), then this repo with --no-deps -e.
# "main" installs megatron-core from a source tree (MAIN_SRC: a Megatron-LM work tree or an
# extracted archive) with --no-deps: only its pure-Python package is used.
# Idempotent: a venv whose stamp matches the request is left alone.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
VENVS=${VENVS:-$repo/.cache/venvs}
PY=${PYTHON:-python3}
TORCH=${TORCH:-2.13.0}
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(0.17.1 0.18.2 0.19.2)
mkdir -p "$VENVS"
for v in "${versions[@]}"; do
  venv=$VENVS/$v
  if [ "$v" = main ]; then
    src=${MAIN_SRC:?MAIN_SRC=<Megatron-LM source tree> is needed for main}
    want="main $(cd "$src" && (git rev-parse HEAD 2>/dev/null || cat .rev 2>/dev/null || echo tree)) $TORCH"
  else
    want="$v $TORCH"
  fi
  if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$want" ]; then
    echo "$venv: up to date ($want)"; continue
  fi
  echo "$venv: building ($want)"
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  "${pip[@]}" "torch==$TORCH" numpy "packaging>=24.2" psutil pytest "wrapt>=1.15" "typing_extensions>=4.6" pyyaml
  if [ "$v" = main ]; then
    "${pip[@]}" --no-deps --ignore-requires-python "$src" \
      || echo "$src" > "$venv/lib/$("$venv/bin/python" -c 'import sys;print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')/site-packages/megatron_lm_main.pth"
  else
    "${pip[@]}" --ignore-requires-python --no-deps "megatron-core==$v"
  fi
  "${pip[@]}" --no-deps --ignore-requires-python -e "$repo"
  echo "$want" > "$venv/.stamp"
done
