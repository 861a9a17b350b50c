#!/usr/bin/env bash
# Builds DEST/fl_patch: the committed engine (git HEAD) with the working tree's FlagGems pack in it,
# for runs while the engine's working copy is mid-edit (another engineer's refactor). Put DEST
# first on PYTHONPATH. Usage: bash bench/support/gems_shadow.sh DEST
set -euo pipefail
dest=${1:?destination folder}
repo=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$dest/fl_patch"
mkdir -p "$dest"
git -C "$repo" archive HEAD fl_patch | tar -x -C "$dest"
rm -rf "$dest/fl_patch/impls/flaggems"
cp -r "$repo/fl_patch/impls/flaggems" "$dest/fl_patch/impls/flaggems"
find "$dest/fl_patch" -name __pycache__ -prune -exec rm -rf {} +
echo "$dest/fl_patch: engine of $(git -C "$repo" rev-parse --short HEAD), FlagGems pack of the working tree"
