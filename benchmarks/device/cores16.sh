#!/usr/bin/env bash
# Issue 35 on the lent machine's 16 cores (its GPU unused): the what-if from 1 to 16 real ranks
# and the overhead A/B without a neighbour; JSON into $OUT/cores16. ~6 min (the what-if alone took
# over 150 s on an H200 machine on 2026-11-27: ResNet-50 runs of 20-25 s each at 1-8 ranks).
#   OUT=/tmp/out bash benchmarks/device/cores16.sh [whatif] [step] [job]
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device/setup.sh || exit 1
O="${OUT:-/tmp/out}/cores16"; mkdir -p "$O"
(lscpu; echo; free -g; echo; uptime) >"$O/machine.txt" 2>&1
part() { # NAME LIMIT CMD...
  local name="$1" limit="$2"; shift 2
  echo "== $name ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"
  timeout "$limit" "$@" </dev/null >"$O/$name.log" 2>&1; local rc=$?
  echo "   rc=$rc"; tail -n 25 "$O/$name.log" | cut -c1-220
}
for p in ${@:-whatif step job}; do case "$p" in
  whatif) part whatif 240 "$PY" benchmarks/bench_whatif.py --examples kmeans,resnet50-ddp --ladder 1,2,4,8,16 --quick --timeout 60 --out /tmp/bw --json "$O/whatif-ladder.json" ;;
  step) part step 130 "$PY" benchmarks/bench_overhead.py --kind step --cases kmeans_mpi,mnist_ddp,resnet50_ddp,ddp_2ms,ddp_hook_floor --ranks 4 --pairs 10 --block-s 0.3 --timeout 60 --force --json "$O/overhead-step.json" ;;
  job) part job 80 "$PY" benchmarks/bench_overhead.py --kind job --cases ddp_tutorial_job --job-pairs 2 --timeout 40 --force --json "$O/overhead-job.json" ;;
esac; done
echo "cores16.sh done $(date +%T)"
