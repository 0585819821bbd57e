#!/usr/bin/env bash
# Copy what a device run of the real-SGLang tier needs into DEST (a git-ignored folder of the
# checkout the device tool sends): ddtreed (its rules and remediations are in ddtreed/data), the scripts, the tiny-model
# maker, and ddtreed's dependencies the GPU image lacks as wheels (WHEELS=dir of .whl files).
# usage: scripts/stage-devcarry.sh DEST
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:?usage: stage-devcarry.sh DEST}
rm -rf "$dest" && mkdir -p "$dest"
(cd "$here" && tar --exclude=__pycache__ -cf - ddtreed scripts pyproject.toml) | tar -xf - -C "$dest"
if [ -n "${WHEELS:-}" ]; then mkdir -p "$dest/whl" && cp "$WHEELS"/*.whl "$dest/whl/"; fi
du -sb "$dest" | awk '{printf "staged %.2f MB in %s\n", $1 / 1e6, $2}'
