#!/usr/bin/env bash
# Issue 34 on a lent GPU machine: every GPU case of benchmarks/device/gpu.py, JSON into $OUT/gpu
# (run dirs of the forecast runs in $OUT/gpu too). Each case has its own time limit, so one
# that hangs does not eat the lease; ~4 min in all on an H100/H200.
#   OUT=/tmp/out bash benchmarks/device/gpu.sh [CASE ...]   # default: all
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device/setup.sh || exit 1
O="${OUT:-/tmp/out}/gpu"; mkdir -p "$O"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv >"$O/nvidia-smi.csv" 2>&1
G="$PY benchmarks/device/gpu.py"
TR="$BIN/torchrun --standalone"
case_run() { # NAME LIMIT CMD...
  local name="$1" limit="$2"; shift 2
  echo "== $name ($(date +%T))"
  timeout "$limit" "$@" </dev/null >"$O/$name.log" 2>&1; local rc=$?
  echo "   rc=$rc"; grep -E '^(profile|ab|forecast|oneliners)-?[a-z0-9-]*: ' "$O/$name.log" | cut -c1-400
  [ $rc = 0 ] || tail -5 "$O/$name.log"
}
ALL="tests profile ab forecast oneliners"
for c in ${@:-$ALL}; do case "$c" in
  tests) case_run tests 150 "$PY" -m pytest -q -x tests/test_device.py -p no:cacheprovider ;;
  profile)
    case_run profile-resnet50-nccl 60 $G profile --model resnet50 --steps 30 --profiled 6 --out "$O"
    case_run profile-gpt2-nccl 60 $G profile --model gpt2 --steps 30 --profiled 6 --out "$O"
    case_run profile-resnet50-gloo2 90 $TR --nproc_per_node=2 benchmarks/device/gpu.py profile --backend gloo --model resnet50 --batch 64 --steps 30 --profiled 6 --out "$O" ;;
  ab)
    case_run ab-resnet50 75 $G ab --model resnet50 --pairs 8 --block-s 0.75 --out "$O"
    case_run ab-gpt2 75 $G ab --model gpt2 --pairs 8 --block-s 0.75 --out "$O" ;;
  forecast)
    case_run forecast-resnet50 75 $G forecast --model resnet50 --steps 300 --eval-every 75 --eval-batches 15 --ckpt-every 100 --out "$O"
    case_run forecast-gpt2 75 $G forecast --model gpt2 --steps 300 --eval-every 75 --eval-batches 15 --ckpt-every 100 --out "$O" ;;
  oneliners) case_run oneliners 90 $G oneliners --out "$O" ;;
esac; done
echo "gpu.sh done $(date +%T)"
