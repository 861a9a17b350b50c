#!/usr/bin/env bash
# Builds DEST: a copy of the repository at git HEAD with the working tree's FlagGems-pack paths laid
# over it (src/fl_patch/impls/flaggems and the shared packs it builds on, impls/te and impls/without_te,
# tests/test_flaggems_*.py, tests/support/flaggems/gems_*.py, bench/gpu_*,
# bench/support/gems_*), for runs while another engineer's working copy of the engine is mid-edit.
# Run from DEST as from the repository. Usage: bash bench/support/gems_shadow.sh DEST
set -euo pipefail
dest=${1:?destination folder}
repo=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$dest"
mkdir -p "$dest"
git -C "$repo" archive HEAD | tar -x -C "$dest"
for pack in flaggems te without_te; do
    rm -rf "$dest/src/fl_patch/impls/$pack"
    cp -r "$repo/src/fl_patch/impls/$pack" "$dest/src/fl_patch/impls/$pack"
done
cp "$repo"/tests/test_flaggems_*.py "$dest/tests/"
mkdir -p "$dest/tests/support/flaggems" && cp "$repo"/tests/support/flaggems/gems_*.py "$dest/tests/support/flaggems/"
cp "$repo"/bench/gpu_* "$dest/bench/"
mkdir -p "$dest/bench/support"
cp "$repo"/bench/support/gems_* "$dest/bench/support/"
find "$dest" -name __pycache__ -prune -exec rm -rf {} +
echo "$dest: repository at $(git -C "$repo" rev-parse --short HEAD) with the working tree's FlagGems-pack paths"
