"""Issue 33: Keras+Horovod's training function alone (no ``fit`` loop, no callbacks), with and
without ailens's graph hooks. Launch with two ranks::

    horovodrun --gloo -np 2 -H localhost:2 .venv/bin/python \\
        benchmarks/overhead/_keras_hvd_fn.py [--compression custom] [--profile DIR]

The models of ``keras_hvd`` (the mnist example's, batch 32 per rank, 1 intra- and 1 inter-op
thread), each fitted 3 steps to trace it (the lensed one with ``LensCallback``, so its graph
carries the slates), then ``model.train_function`` called directly, arms in alternating
blocks of ``--steps`` calls. Arms: ``plain``, ``plain2`` (a second plain model: how much two
plain graphs differ, the control), ``lensed``; with ``--compression custom`` (a user
compressor: ailens then hooks the allreduce inside Horovod's ``tf.cond`` branch, with Python
hooks) also ``lensed_chained``: the conds chained as before issue 33's fix. Rank 0 prints per
arm the median difference of paired blocks to ``plain`` (us per call, 95 % bootstrap interval).

``--profile DIR``: also a TF profiler trace of ``--profile-calls`` calls per arm on each rank
(DIR/rank<r>), and per arm the medians of: the compute thread's busy time per call, the time
from the last collective's completion to the call's end, and the compute done in that tail.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "mnist"))

import numpy as np  # noqa: E402
from _keras_ab import make_dataset  # noqa: E402
from common import keras_model  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compression", choices=("none", "custom"), default="none")
    p.add_argument("--steps", type=int, default=10, help="calls per block")
    p.add_argument("--blocks", type=int, default=100, help="blocks per arm")
    p.add_argument("--profile", default="", help="directory for a profiler trace")
    p.add_argument("--profile-calls", type=int, default=40)
    args = p.parse_args()

    import horovod.tensorflow as hvd
    import horovod.tensorflow.keras as hvd_keras
    import tensorflow as tf
    from ailens.integrations import tfgraph
    from ailens.integrations.keras import LensCallback
    from horovod.tensorflow.compression import Compression, Compressor

    class Same(Compressor):  # a compression of the user's own: not one ailens knows
        @staticmethod
        def compress(tensor):
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras = tf.keras
    compression = Same if args.compression == "custom" else Compression.none
    arms = ["plain", "plain2", "lensed"] + (["lensed_chained"] if compression is Same else [])
    exempt = tfgraph._exempt_conds
    fns = {}
    for arm in arms:
        tfgraph._exempt_conds = (lambda graph, first: None) if arm == "lensed_chained" else exempt
        keras.utils.set_random_seed(0)
        model = keras_model(keras)
        opt = hvd_keras.DistributedOptimizer(
            keras.optimizers.SGD(0.02 * hvd.size(), momentum=0.9),
            name=f"Distributed_{arm}",  # Horovod caches its function by these arguments
            compression=compression,
        )
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(optimizer=opt, loss=loss, metrics=["accuracy"])
        callbacks = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)]
        if arm.startswith("lensed"):
            run_dir = tempfile.mkdtemp(prefix="ailens-fn-") if hvd.rank() == 0 else None
            callbacks.append(LensCallback(run_dir=hvd.broadcast_object(run_dir, root_rank=0)))
        data = make_dataset(tf, 32, 1 + hvd.rank())
        model.fit(data, steps_per_epoch=3, epochs=1, callbacks=callbacks, verbose=0)
        fns[arm] = (model.train_function, iter(data))
    tfgraph._exempt_conds = exempt

    def block(arm: str, n: int, tag: str) -> float:
        fn, it = fns[arm]
        hvd.allreduce(tf.constant(0.0), name=f"sync.{tag}.{arm}")
        t = tf.timestamp()
        for _ in range(n):
            fn(it)
        return (float(tf.timestamp()) - float(t)) / n * 1e6

    times = {a: [] for a in arms}
    for b in range(args.blocks):
        for arm in arms if b % 2 == 0 else arms[::-1]:
            times[arm].append(block(arm, args.steps, str(b)))
    if hvd.rank() == 0:
        print(f"plain: median {statistics.median(times['plain']):.0f} us per call")
        for arm in arms[1:]:
            d = np.array(times[arm]) - np.array(times["plain"])
            rng = np.random.default_rng(0)
            boot = [np.median(rng.choice(d, len(d))) for _ in range(2000)]
            lo, hi = np.percentile(boot, [2.5, 97.5])
            print(f"{arm} - plain: median {np.median(d):+.0f} us per call [{lo:+.0f}, {hi:+.0f}]")
    if args.profile:
        out = Path(args.profile) / f"rank{hvd.rank()}"
        tf.profiler.experimental.start(str(out))
        for arm in arms:
            block(arm, args.profile_calls, "profile")
        tf.profiler.experimental.stop()
        if hvd.rank() == 0:
            report_profile(out, arms)
    hvd.shutdown()


def report_profile(out: Path, arms: list) -> None:
    """Per arm, medians over its profiled calls (see the module's doc)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(next(out.glob("plugins/profile/*/*.xplane.pb")).read_bytes())
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    meta = plane.event_metadata

    def events(line) -> list:
        t0 = line.timestamp_ns * 1000
        return [(t0 + e.offset_ps, e.duration_ps, meta[e.metadata_id].name) for e in line.events]

    lines = [(line.name, events(line)) for line in plane.lines]
    python = [ev for name, ev in lines if name.startswith("python")]
    compute = [ev for name, ev in lines if name.startswith("tf_Compute")][0]
    done = sorted(
        (t, d) for ev in python[1:] for t, d, n in ev if n == "ExecutorState::ProcessAsync::Done"
    )
    # The calls, by the function each arm's train_function runs (in tracing order: arms).
    call = "EagerLocalExecute: __inference_train"
    calls = [(t, d, n) for t, d, n in python[0] if n.startswith(call)]
    functions = sorted({n for _, _, n in calls}, key=lambda n: int(n.rsplit("_", 1)[1]))
    skip = ("ExecutorState::Process", "ExecutorDoneCallback", "ThreadpoolListener")
    for arm, fname in zip(arms, functions, strict=True):
        busy, tail, tail_busy = [], [], []
        for t0, d, n in calls:
            if n != fname:
                continue
            t1 = t0 + d
            ops = [(t, dd) for t, dd, nn in compute if t0 <= t <= t1 and not nn.startswith(skip)]
            ends = [t + dd for t, dd in done if t0 <= t <= t1]
            busy.append(sum(dd for _, dd in ops) / 1e6)
            if ends:
                tail.append((t1 - ends[-1]) / 1e6)
                tail_busy.append(sum(dd for t, dd in ops if t >= ends[-1]) / 1e6)
        print(
            f"profile {arm}: {len(busy)} calls, compute busy {statistics.median(busy):.0f} us, "
            f"after the last collective {statistics.median(tail):.0f} us "
            f"(compute {statistics.median(tail_busy):.0f} us)"
        )


if __name__ == "__main__":
    main()
