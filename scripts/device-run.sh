#!/usr/bin/env bash
# One command of the real-SGLang tier on the device machine, from the checkout root, with this
# repository staged in .devcarry (scripts/stage-devcarry.sh) and the bundle in .real-sglang:
#   bash .devcarry/scripts/device-run.sh NAME SCENARIO...
# Leftovers of an earlier command (a ddtreed run or SGLang tree cut off by a timeout) are killed
# by pid first; results go to $OUT as NAME.results.json, NAME.scenarios.txt and NAME.tar.xz.
set -u
name=$1; shift
root=$(pwd)
out=${OUT:-/tmp/device-out}
work=/tmp/rs-out/$name
mkdir -p "$out" "$work"
python3 - <<'PY'
import os, psutil
for proc in psutil.process_iter(["pid", "cmdline"]):
    cmd = " ".join(proc.info["cmdline"] or [])
    if proc.pid != os.getpid() and ("sglang.launch_server" in cmd or "ddtreed run --config /tmp/rs/" in cmd
                                    or cmd.startswith("sglang::")):
        print("killing leftover", proc.pid, cmd[:100]); proc.kill()
PY
export WHEELS_DIR=$root/.devcarry/whl BUNDLE_DIR=$root/.real-sglang DDTREED_REPO=$root/.devcarry \
  MODEL_SCRIPT=$root/.devcarry/scripts/make_tiny_model.py
timeout "${BUDGET_S:-560}" bash "$root/.devcarry/scripts/gpu-real-sglang.sh" "$work" "$@"
rc=$?
cp "$work/results.json" "$out/$name.results.json" 2>/dev/null
cp "$work/scenarios.txt" "$out/$name.scenarios.txt" 2>/dev/null
tar -cJf "$out/$name.tar.xz" -C /tmp/rs-out "$name" 2>/dev/null
echo "device-run $name: rc $rc"
exit $rc
