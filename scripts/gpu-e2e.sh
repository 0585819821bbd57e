#!/usr/bin/env bash
# The GPU proof in one command, on a machine with an NVIDIA GPU and torch:
#   1. the founding loop with a real torch.cuda.CUDAGraph captured 8 wide (DDTree budget 32);
#   2. the prevented path (preflight patches before the first launch);
#   3. a device-side assert inside a replayed graph (out-of-range ids: a flood of per-thread lines);
#   4. an out-of-memory at graph capture (plain allocations);
# then the GPU-marked tests and the detection-latency benchmark. Everything lands in OUT_DIR,
# and scripts/gpu_report.py turns it into the figures of docs/gpu-e2e.md.
#
# usage: scripts/gpu-e2e.sh [OUT_DIR]       (PYTHON=... to pick the interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
out_dir=${1:-gpu-e2e-out}
python=${PYTHON:-python3}
work=$(mktemp -d /tmp/ddtreed-gpu-XXXXXX)
mkdir -p "$out_dir"
export PYTHONUNBUFFERED=1

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0))'
} 2>&1 | tee "$out_dir/versions.txt"

status=0
run_case() {  # name, then `ddtreed demo` options
  local name=$1; shift
  local started=$(date +%s.%N)
  "$python" -m ddtreed demo --device cuda --state-dir "$work/$name" --json "$@" \
    >"$out_dir/$name.json" 2>"$out_dir/$name.log"
  local rc=$?
  cp "$work/$name/logs/service.stderr.log" "$out_dir/$name.service.log" 2>/dev/null
  awk -v n="$name" -v rc="$rc" -v s="$started" -v e="$(date +%s.%N)" \
    'BEGIN { printf "%s: exit %d in %.1fs\n", n, rc, e - s }' | tee -a "$out_dir/cases.txt"
  [ "$rc" -eq 0 ] || status=1
}

run_case founding
run_case preflight --preflight
run_case device-assert --fault device-assert
run_case oom-at-capture --fault oom-at-capture

"$python" -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py 2>&1 | tee "$out_dir/pytest.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

"$python" benchmarks/detection_latency.py --events 300 >"$out_dir/detection.json" 2>"$out_dir/detection.log" \
  || echo "detection benchmark failed (see detection.log)"

"$python" scripts/gpu_report.py "$out_dir" | tee "$out_dir/summary.json"
exit $status
