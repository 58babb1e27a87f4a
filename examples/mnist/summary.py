"""A short summary of a run directory, for when the ``ailens report`` CLI is not installed.

usage: python summary.py RUN_DIR
"""

import json
import sys

import ailens

run = ailens.load_run(sys.argv[1])
print(f"run {run.meta['run_id']}: {run.world_size} ranks, framework {run.meta['framework']}")
for r in run.ranks:
    ops = {name: int((r.events["op"] == i).sum()) for i, name in enumerate(r.ops)}
    print(f"  rank {r.rank}: {r.n_events} collectives {ops}, {len(r.steps['step'])} steps")
for w in run.warnings:
    print("  warning:", w)
online = run.path / "phases-online.json"
if online.exists():
    t = json.loads(online.read_text())["table"]
    print(f"  online phases: {t['n_kept']} kept of {t['n_phases']}, communication "
          f"{t['comm_pct']:.1f}% / compute {t['compute_pct']:.1f}% of {t['total_s']:.2f} s")
    for ph in t["phases"]:
        print(f"    phase {ph['id']}: {ph['op']:<10} SIMO {ph['simo']:>3}  x{ph['weight']:<5} "
              f"{ph['time_per_occurrence_s'] * 1e3:8.3f} ms each  {ph['share']:6.1%} of time")
