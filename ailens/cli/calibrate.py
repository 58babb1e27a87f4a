"""``ailens calibrate``: measure, on the job's own transport and nodes, what the what-if needs.

Launch it the way the job is launched, on the same nodes::

    mpiexec -n 2 python -m ailens calibrate --out RUN_DIR/calibration.json          # mpi4py
    torchrun --nproc-per-node 2 -m ailens calibrate --out RUN_DIR/calibration.json  # DDP, gloo
    horovodrun -np 2 python -m ailens calibrate --out RUN_DIR/calibration.json      # Horovod

The transport follows the launcher (``--transport`` overrides): Horovod's own ops under
horovodrun, torch.distributed gloo under torchrun, MPI otherwise; the integrations own the
transports (ailens/integrations/_transport.py), the measurement is ailens/tools/calibrate.py.
``--from-nccl-tests`` fits a GPU platform on nccl-tests logs instead (no launch).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .._io import write_json
from ..integrations._transport import TRANSPORTS, launcher_transport, open_transport
from ..tools.calibrate import calibrate, run_sizes


def _parser(default_out: Path) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ailens calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON to write (default {default_out}; platform.json with --from-nccl-tests)",
    )
    ap.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default=None,
        help="collectives to time (default: from the launcher: horovodrun -> horovod, "
        "torchrun -> gloo, otherwise mpi)",
    )
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=16 << 20)
    ap.add_argument(
        "--reps", type=int, default=20, help="repetitions per size (fewer for large messages)"
    )
    ap.add_argument(
        "--sizes-from",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="also time the exact (op, bytes) pairs this recorded run used",
    )
    ap.add_argument(
        "--no-compute", action="store_true", help="skip the thread / node-sharing compute probe"
    )
    nt = ap.add_argument_group(
        "from nccl-tests output (no launch: fits a platform description on logs you have)"
    )
    nt.add_argument(
        "--from-nccl-tests",
        nargs="+",
        type=Path,
        default=None,
        metavar="LOG",
        help="fit a platform (ailens/predict/platforms.py) on these all_reduce_perf outputs: "
        "one-node logs fit the intra-node link, multi-node logs the network; writes the platform "
        "JSON to --out (default platform.json)",
    )
    nt.add_argument(
        "--devices-per-node",
        type=int,
        default=None,
        metavar="N",
        help="devices per node of the platform (default: the base platform's, else the most "
        "ranks one host had in the logs)",
    )
    nt.add_argument(
        "--platform",
        default=None,
        metavar="LABEL|FILE",
        help="platform whose figures a log does not measure are kept (a default label such "
        "as dgx-a100, dgx1-v100, or a platform JSON); default: a generic node",
    )
    nt.add_argument("--name", default=None, help="name of the fitted platform")
    return ap


def main(argv: list[str] | None = None) -> int:
    """``ailens calibrate [--out PATH] [--transport T] [--sizes-from RUN_DIR] ...``; run under
    the job's launcher."""
    default_out = Path(os.environ.get("AILENS_RUN_DIR", ".")) / "calibration.json"
    ap = _parser(default_out)
    args = ap.parse_args(argv)
    if args.from_nccl_tests:
        return _from_nccl_tests(args)
    args.out = args.out or default_out
    transport = args.transport or launcher_transport()
    comm = open_transport(transport)
    if comm.size < 2:
        if comm.rank == 0:
            print(
                "ailens calibrate: needs 2 or more ranks, launched like the job: "
                "mpiexec -n 2 python -m ailens calibrate --out ... (or torchrun / horovodrun)"
            )
        comm.close()
        return 2
    extra = run_sizes(args.sizes_from) if args.sizes_from else []
    doc = calibrate(
        comm,
        min_bytes=args.min_bytes,
        max_bytes=args.max_bytes,
        reps=args.reps,
        extra=extra,
        compute=not args.no_compute,
    )
    if doc is None:
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, doc)
    _print_summary(doc)
    print(f"ailens calibrate: wrote {args.out}")
    return 0


def _print_summary(doc: dict) -> None:
    for kind in ("intra", "inter"):
        d = doc[kind]
        if d:
            print(
                f"ailens calibrate: {doc['transport']} {kind}-node on {d['ranks']} ranks: "
                f"alpha {d['alpha'] * 1e6:.2f} us, "
                f"bandwidth {1 / d['beta'] / 1e9 if d['beta'] else float('inf'):.3g} GB/s, "
                f"gamma {d['gamma'] * 1e9:.3f} ns/B (fit error {100 * d['rel_rmse']:.0f}%)"
            )
    c = doc["compute"]
    if c:
        th = c["threads"]
        co = c["corun"]
        print(
            f"ailens calibrate: compute probe ({c['kernel']}): "
            + ", ".join(f"{k} threads {th['1'] / v:.2f}x" for k, v in th.items())
            + "; "
            + ", ".join(f"{k} ranks side by side {v / co['1']:.2f}x slower" for k, v in co.items())
        )


def _from_nccl_tests(args) -> int:
    """``ailens calibrate --from-nccl-tests LOG ...``: a platform fitted on the logs."""
    from ..predict.nccl_tests import platform_from_nccl_tests
    from ..predict.platforms import load_platform, platform_to_dict

    texts = []
    for f in args.from_nccl_tests:
        try:
            texts.append(f.read_text(errors="replace"))
        except OSError as e:
            print(f"ailens calibrate: cannot read {f}: {e}", file=sys.stderr)
            return 2
    try:
        base = load_platform(args.platform) if args.platform else None
        plat = platform_from_nccl_tests(
            texts,
            devices_per_node=args.devices_per_node,
            base=base,
            name=args.name,
            sources=[str(f) for f in args.from_nccl_tests],
        )
    except ValueError as e:
        print(f"ailens calibrate: {e}", file=sys.stderr)
        return 2
    out = args.out or Path("platform.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, platform_to_dict(plat))
    net = plat.network
    print(
        f"ailens calibrate: platform {plat.name}: {plat.devices_per_node} devices per node, "
        f"intra-node {plat.intra.bandwidth_Bps / 1e9:.3g} GB/s bus bandwidth, "
        f"{plat.intra.latency_s * 1e6:.3g} us per ring step; base latency "
        f"{plat.base_latency_s * 1e6:.3g} us"
        + (
            f"; network {plat.nics_per_node} x {net.bandwidth_Bps / 1e9:.3g} GB/s per node, "
            f"{net.latency_s * 1e6:.3g} us per step"
            if net is not None
            else ""
        )
    )
    for note in plat.notes:
        print(f"  {note}")
    print(f"ailens calibrate: wrote {out}")
    return 0
