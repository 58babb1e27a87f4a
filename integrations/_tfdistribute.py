"""tf.distribute (``MultiWorkerMirroredStrategy``): recording the all-reduces of a strategy and
exchanging through it. Used by the Keras adapter for ``fit`` under such a strategy.

Every all-reduce that goes through the strategy (``ReplicaContext.all_reduce``,
``extended.batch_reduce_to`` / ``reduce_to``: the optimizer's gradient all-reduce, one batched
call per step) is recorded as one ``allreduce`` with the summed bytes of the local tensors, by
the run-time graph hooks of ``ailens.integrations.tfgraph``. Those three methods are wrapped
on the strategy's ``extended`` object (``_replica_ctx_all_reduce`` is private TF API: the
funnel ``all_reduce`` uses without ``merge_call``) until detach. Not seen: collectives TF
issues without those calls (``SyncOnRead`` variable reads, ``tf.raw_ops`` collectives), and
how TF splits one batched all-reduce into packs.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import tfgraph
from ._base import Attachment, open_lens, quiet


def multi_worker(model) -> tuple[Any, int | None, int | None]:
    """(strategy, rank, world) for a multi-worker tf.distribute strategy, else (None, None,
    None): rank and world then come from the launcher's environment."""
    strategy = getattr(model, "distribute_strategy", None)
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or "tensorflow" not in sys.modules:
        return None, None, None
    spec = resolver.cluster_spec().as_dict()
    tasks = [(t, i) for t in ("chief", "worker") for i in range(len(spec.get(t, [])))]
    if len(tasks) <= 1 or (resolver.task_type, resolver.task_id) not in tasks:
        return None, None, None
    return strategy, tasks.index((resolver.task_type, resolver.task_id)), len(tasks)


class StrategyAttachment(Attachment):
    """Records the all-reduces of one tf.distribute strategy and exchanges through it."""

    # The methods of strategy.extended every strategy all-reduce goes through; the value
    # reduced is their second argument.
    FUNNELS = ("_replica_ctx_all_reduce", "batch_reduce_to", "reduce_to")

    def __init__(self, strategy, rank: int, world: int, meta: dict, config: dict) -> None:
        import tensorflow as tf

        self.strategy = strategy
        lens = open_lens(rank=rank, world_size=world, exchange=self._exchange, meta=meta, **config)
        super().__init__(lens)
        if not lens.config.enabled:
            return
        try:
            ext = strategy.extended
            for name in self.FUNNELS:
                real = getattr(ext, name, None)
                if real is not None:
                    payload = lambda a, k, name=name: (self._local_tensors(tf, name, a, k), None)  # noqa: E731
                    self.patches.set(
                        ext, name, tfgraph.wrap(tf, "tf.distribute", real, "allreduce", payload)
                    )
            tfgraph.activate("tf.distribute", self)
        except Exception as e:  # noqa: BLE001
            self.patches.restore()
            lens.disable(e)

    def _local_tensors(self, tf, name: str, args, kwargs) -> list:
        """This worker's part of the value being reduced, as a list of tensors."""
        if name == "batch_reduce_to":
            pairs = args[1] if len(args) > 1 else kwargs["value_destination_pairs"]
            values = [v for v, _ in pairs]
        else:  # (reduce_op, value, ...)
            values = [args[1] if len(args) > 1 else kwargs["value"]]
        out = []
        for v in tf.nest.flatten(values, expand_composites=False):
            local = self.strategy.experimental_local_results(v)[0]
            out += [local.values, local.indices] if isinstance(local, tf.IndexedSlices) else [local]
        return out

    def _exchange(self, a):
        """Cross-worker elementwise SUM through the strategy's own all-reduce (not recorded):
        each worker's first local replica contributes the array, the others zeros."""
        import tensorflow as tf

        strategy = self.strategy
        local = max(len(getattr(strategy.extended, "worker_devices", ())), 1)
        value = tf.constant(np.asarray(a, dtype=np.int64))

        def contribute():
            ctx = tf.distribute.get_replica_context()
            return value if ctx.replica_id_in_sync_group % local == 0 else tf.zeros_like(value)

        with quiet():
            per_replica = strategy.run(contribute)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy()
