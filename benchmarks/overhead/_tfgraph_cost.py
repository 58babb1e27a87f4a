"""What the TF graph hooks cost per call of a ``tf.function``, in one process: a function with
``--collectives`` stand-in collectives (``tf.identity`` of a 1000-float tensor, wrapped the way
``tfgraph.wrap`` wraps Horovod's), traced three ways -- unhooked, with the Python hooks (two
``tf.numpy_function`` per collective) and with slates (timed in the graph, read every
``COLLECT_EVERY`` step ends) -- then called in interleaved rounds; prints one ``TFGRAPH {json}``
line: the median over rounds of each way's mean call time (us): ``plain_us`` unhooked,
``step_end_us`` what ``Attachment.step_end`` (the Lens's step end, one rank) adds to it, and
``python_hooks_us`` / ``slates_us`` what each way adds on top of that (for slates, the
amortised read: ``tfgraph.step_ended``)::

    python benchmarks/overhead/_tfgraph_cost.py --collectives 8

Not an A/B of training: it isolates the graph path's own cost from the model and the Lens's
step-end work, which the keras_hvd case includes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--collectives", type=int, default=8)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=200, help="calls per way per round")
    args = p.parse_args()

    import tensorflow as tf
    from ailens.integrations import Attachment, tfgraph

    from ailens import Lens

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)

    def stand_in(tensor, name=None):  # the collective: one op on the tensor
        return tf.identity(tensor, name=name)

    wrapped = {
        way: tfgraph.wrap(tf, way, stand_in, "allreduce", lambda a, k: (a[0], None))
        for way in ("python", "slates")
    }
    wrapped["plain"] = wrapped["step_end"] = stand_in
    atts = {}
    for way in ("step_end", "python", "slates"):
        att = Attachment(Lens(run_dir=tempfile.mkdtemp(), framework=f"bench-{way}"))
        att.collects_graphs = way == "slates"
        tfgraph.activate(way, att)
        if way == "slates":
            tfgraph.prepare_slates(tf, way)
        atts[way] = att
    x = tf.random.uniform([1000])

    def make(way):
        collective = wrapped[way]

        @tf.function
        def fn(t):
            outs = [collective(t * (i + 1)) for i in range(args.collectives)]
            return tf.add_n(outs)

        return fn

    fns = {way: make(way) for way in ("plain", "python", "slates")}
    fns["step_end"] = fns["plain"]  # unhooked, with the Lens's step end: the hooks' baseline

    def run(way: str, n: int) -> float:
        fn, att = fns[way], atts.get(way)
        t0 = time.perf_counter()
        for _ in range(n):
            fn(x)
            if att is not None:
                att.step_end()
                if way == "slates":
                    tfgraph.step_ended(way, att)
        return (time.perf_counter() - t0) / n

    for way in fns:
        run(way, 20)  # trace and warm up
    means: dict[str, list[float]] = {way: [] for way in fns}
    for r in range(args.rounds):
        order = list(fns) if r % 2 == 0 else list(reversed(fns))
        for way in order:
            means[way].append(run(way, args.calls))
    med = {way: statistics.median(v) * 1e6 for way, v in means.items()}
    line = {
        "collectives": args.collectives,
        "plain_us": round(med["plain"], 1),
        "step_end_us": round(med["step_end"] - med["plain"], 1),
        "python_hooks_us": round(med["python"] - med["step_end"], 1),
        "slates_us": round(med["slates"] - med["step_end"], 1),
        "ticks": {way: atts[way].lens.ticks for way in atts},
        "loadavg": list(os.getloadavg()),
    }
    for att in atts.values():
        att.close()
    print("TFGRAPH " + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
