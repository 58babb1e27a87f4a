"""``ailens probe``: this node's platform descriptor from micro-benchmarks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .._io import write_text
from ._common import emit, positive_float


def add_probe(sub) -> None:
    p = sub.add_parser(
        "probe",
        help="describe this node (compute, memory bandwidth, collectives) with micro-benchmarks",
        description="Short micro-benchmarks (numpy compute per core and on all usable cores, "
        "memory bandwidth; collective alpha/beta when launched with ranks) written as a "
        "platform descriptor for `ailens whatif --platform` and `ailens fit`.",
    )
    p.add_argument("-o", "--output", type=Path, default=None, metavar="P.json",
                   help="write the descriptor here (default: print it)")  # fmt: skip
    p.add_argument("--name", default=None, help="platform name (default: CPU model and cores)")
    p.add_argument("--seconds", type=positive_float, default=0.5, metavar="S",
                   help="seconds per micro-benchmark (default 0.5)")  # fmt: skip


def cmd_probe(args) -> int:
    from ..tools.probe import launched_ranks, probe

    transport = None
    if launched_ranks() > 1:  # launched with ranks: time the launcher's collectives too
        from ..integrations._transport import launcher_transport, open_transport

        transport = open_transport(launcher_transport())
    desc = probe(seconds=args.seconds, name=args.name, transport=transport)
    if desc is None:  # a rank other than 0 of a launched probe
        return 0
    text = json.dumps(desc, indent=1)
    if args.output is None:
        emit(text)
    else:
        write_text(args.output, text + "\n")
        print(f"ailens: wrote {args.output}", file=sys.stderr)
    return 0
