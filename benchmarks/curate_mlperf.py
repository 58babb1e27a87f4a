"""Copy the curated MLPerf Training logs of the forecast corpus from the development set.

    .venv/bin/python benchmarks/curate_mlperf.py [--src ../shared/mlperf-dev]

Selection rule (benchmarks/forecast_corpus/mlperf/README.md): for every round and benchmark,
among the logs that parse and end with run_stop, each system's lowest-numbered result; of
those, the system with the fewest and the one with the most nodes (node count read from the
system name: ``n48``, ``16N``, ``2x...``, ``8_node``, TPU pods as 8 chips a node), or the first
two systems when all have the same. Coverage, not calm runs: every family and round, single-
and multi-node, with and without evaluation events. Files are copied as published (gzip);
``index.json`` keeps each one's provenance (repository, commit, path).
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ailens import LogError, read_timeline  # noqa: E402

DST = REPO / "benchmarks" / "forecast_corpus" / "mlperf"
_NODES = (
    (r"(?:^|[_-])n(\d+)(?:[_-]|$)", re.I),
    (r"(\d+)_?node", re.I),
    (r"(\d+)N(?:[_-]|$)", 0),
    (r"^(\d+)x", 0),
)


def nodes(system: str) -> int:
    for pattern, flags in _NODES:
        m = re.search(pattern, system, flags)
        if m:
            return int(m.group(1))
    m = re.search(r"tpu-v3-(\d+)", system)
    return max(1, int(m.group(1)) // 8) if m else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=REPO.parent / "shared" / "mlperf-dev")
    args = ap.parse_args()
    index = json.loads((args.src / "index.json").read_text())
    by = collections.defaultdict(list)
    for x in index:
        try:
            tl = read_timeline(args.src / x["file"], include_init=False)
        except LogError as e:
            print(f"not parsed, left out: {e}", file=sys.stderr)
            continue
        if not tl.finished:
            print(f"no run_stop (no actual total), left out: {x['file']}", file=sys.stderr)
            continue
        by[(x["round"], x["benchmark"])].append(x)
    chosen = []
    for _, xs in sorted(by.items()):
        first: dict[str, dict] = {}
        for x in xs:
            first.setdefault(x["system"], x)
        systems = list(first.values())
        small = min(systems, key=lambda x: nodes(x["system"]))
        big = max(systems, key=lambda x: nodes(x["system"]))
        pick = [small] if big is small else [small, big]
        if len(pick) == 1 and len(systems) > 1:
            pick.append(next(x for x in systems if x is not small))
        chosen += [{**x, "nodes_from_name": nodes(x["system"])} for x in pick]
    if DST.is_dir():
        for p in DST.glob("v*"):
            shutil.rmtree(p)
    for x in chosen:
        out = DST / x["file"]
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(args.src / x["file"], out)
    (DST / "index.json").write_text(json.dumps(chosen, indent=1) + "\n")
    size = sum(p.stat().st_size for p in DST.rglob("*.gz"))
    print(f"{len(chosen)} logs, {size / 1e6:.1f} MB in {DST}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
