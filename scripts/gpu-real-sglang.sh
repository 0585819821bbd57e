#!/usr/bin/env bash
# The real-SGLang tier: the real `ddtreed run` supervising real `sglang.launch_server` 0.5.16 on a
# GPU machine, through the scenarios of scripts/real_sglang_scenarios.py. Results (results.json,
# per-scenario incidents, service and ddtreed logs) land in OUT_DIR.
#
# usage: scripts/gpu-real-sglang.sh OUT_DIR SCENARIO...      (`all` for every scenario)
#
# Needs, next to the repository (or named by the environment):
#   BUNDLE_DIR  the SGLang bundle (siteA.tar.xz, siteB.tar.xz from
#               ../shared/real-sglang/build-bundle.sh; default .real-sglang)
#   WHEELS_DIR  ddtreed's own dependencies as wheels when the machine lacks them (optional)
#   MODEL_SCRIPT make_tiny_model.py (default: scripts/make_tiny_model.py)
# Setup is skipped when /tmp/site and /tmp/model already exist (a warm machine), so scenarios can
# be spread over several commands.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=${DDTREED_REPO:-$(cd "$here/.." && pwd)}
out=${1:?usage: gpu-real-sglang.sh OUT_DIR SCENARIO...}; shift
bundle=${BUNDLE_DIR:-.real-sglang}
wheels=${WHEELS_DIR:-}
model_script=${MODEL_SCRIPT:-$here/make_tiny_model.py}
mkdir -p "$out" && out=$(cd "$out" && pwd)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NCCL_NVLS_ENABLE=0 \
  TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s.%N)
step() { awk -v s="$t0" -v e="$(date +%s.%N)" -v m="$1" 'BEGIN { printf "[%7.1fs] %s\n", e - s, m }' | tee -a "$out/setup.txt"; }

# Each part once (a warm machine keeps /tmp): the parts may come in separate commands when the
# whole bundle does not fit one command's carry.
mkdir -p /tmp/site
for f in "$bundle"/site*.tar.xz; do
  [ -f "$f" ] || continue
  mark=/tmp/site/.unpacked-$(basename "$f")
  [ -f "$mark" ] && continue
  tar -xJf "$f" -C /tmp/site && touch "$mark" && step "unpacked $(basename "$f") into /tmp/site"
done
if [ -n "$wheels" ] && [ ! -d /tmp/ddtreed-deps ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ddtreed-deps \
    "$wheels"/*.whl && step "ddtreed dependencies installed into /tmp/ddtreed-deps"
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}:/tmp/ddtreed-deps"
if [ "${SETUP_ONLY:-0}" = 1 ]; then step "setup only"; exit 0; fi
if [ ! -f /tmp/model/config.json ]; then
  PYTHONPATH=/tmp/site:$PYTHONPATH python3 "$model_script" /tmp/model /tmp/dflash_draft >"$out/model.txt" 2>&1
  step "tiny model made (rc $?)"
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
  PYTHONPATH=/tmp/site python3 -c 'import importlib.metadata as m; print("sglang", m.version("sglang"))'
  (cd /tmp && python3 -c 'import ddtreed, structlog, inotify_simple, psutil, re2; print("ddtreed", ddtreed.__version__, "from", ddtreed.__file__)')
} >>"$out/versions.txt" 2>&1
step "versions: $(tr '\n' ';' <"$out/versions.txt")"

# From /tmp: `python3 -m ddtreed` puts the working directory first on sys.path, and the checkout
# the device tool sends may hold another ddtreed than the one staged in $repo.
(cd /tmp && python3 "$here/real_sglang_scenarios.py" "$out" "$@") 2>&1 | tee -a "$out/scenarios.txt"
status=${PIPESTATUS[0]}
step "scenarios done (rc $status)"
exit "$status"
