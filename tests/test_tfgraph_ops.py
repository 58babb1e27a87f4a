"""Issue 33: what a recorded collective adds to a TF graph (slates: the graph times it itself).
Every op there runs at every call of the training function, so the count is the cost: two
timestamps, the row, its index and the write per collective; a graph's call count three more
(its increment, and the call's slot in the ring). A real tf.function, a real Lens."""

from __future__ import annotations

import collections
import tempfile

import pytest


def test_a_collective_on_a_slate_adds_five_ops_and_no_cast():
    tf = pytest.importorskip("tensorflow")
    from ailens import Lens
    from ailens.integrations import Attachment, tfgraph

    def collective(tensor, name=None):  # stands where horovod's allreduce is
        return tf.identity(tensor, name=name)

    key = "issue33-ops"
    wrapped = tfgraph.wrap(tf, key, collective, "allreduce", lambda a, k: (a[0], None))
    att = Attachment(Lens(run_dir=tempfile.mkdtemp(), framework="ops-test"))
    att.collects_graphs = True
    tfgraph.activate(key, att)
    tfgraph.prepare_slates(tf, key)
    x = tf.ones([16])

    def ops_of(fn) -> collections.Counter:
        graph = fn.get_concrete_function(x).graph
        return collections.Counter(op.type for op in graph.get_operations())

    n = 8

    @tf.function
    def plain(t):
        return tf.add_n([collective(t * (i + 1)) for i in range(n)])

    @tf.function
    def lensed(t):
        return tf.add_n([wrapped(t * (i + 1)) for i in range(n)])

    try:
        added = ops_of(lensed) - ops_of(plain)
        lensed(x)
        att.step_end()
        tfgraph.step_ended(key, att)  # the first step end reads the slates
        assert att.lens.ticks == n  # every collective recorded, with its bytes
    finally:
        att.close()
    assert added["Timestamp"] == 2 * n and added["ResourceScatterUpdate"] == n
    assert added["Pack"] == n
    assert added["Cast"] == 0  # the bytes are all known while tracing: a constant
    # The row index: one add per collective but the slate's first.
    assert added["AddV2"] == n - 1
    executed = sum(v for k, v in added.items() if k not in ("Const", "NoOp", "Placeholder"))
    assert executed == 5 * n - 1 + 4, added  # + the call count: read, increment, sub, mod
