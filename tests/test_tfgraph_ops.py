"""Issue 33: what a recorded collective adds to a TF graph (slates: the graph times it itself).
Every op there runs at every call of the training function, so the count is the cost: two
timestamps, the row, its index and the write per collective; a graph's call count three more
(its increment, and the call's slot in the ring). A real tf.function, a real Lens."""

from __future__ import annotations

import collections
import json
import re
import sys
import tempfile

import pytest
from conftest import REPO, run_ranks, venv_tool


def test_a_collective_on_a_slate_adds_five_ops_and_no_cast():
    tf = pytest.importorskip("tensorflow")
    from ailens.integrations import Attachment, tfgraph

    from ailens import Lens

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


# ------------------------------------------------ Keras + Horovod: the collectives' ordering

GRAPH = REPO / "tests/parallel/keras_hvd_graph.py"


def _graph_facts(tmp_path, ranks: int) -> dict:
    """keras_hvd_graph.py's RESULT: one process, or ``ranks`` under horovodrun."""
    pytest.importorskip("horovod.tensorflow.keras")
    cmd = [sys.executable, str(GRAPH), str(tmp_path)]
    if ranks > 1:
        tool = venv_tool("horovodrun")
        if tool is None:
            pytest.skip("horovodrun is not installed")
        cmd = [tool, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}", *cmd]
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}
    out = run_ranks(cmd, timeout=150, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    found = re.findall(r"RESULT (\{.*\})", out.stdout)
    assert len(found) == 1, out.stdout[-3000:]
    return json.loads(found[0])


@pytest.mark.parametrize("ranks", [1, 2])
def test_hooks_leave_horovods_collectives_as_independent_as_without(tmp_path, ranks):
    """Tracing-time facts of the real training function, not timings. One rank: ailens hooks
    the allreduce inside Horovod's tf.cond branch (as with HOROVOD_ELASTIC or a custom
    compression), which makes the cond a stateful op; tf.function then chained the conds, so
    each collective waited for the previous one to finish. Two ranks: the cond is timed as a
    whole on the slate; no stamp, write or count may come before a collective."""
    facts = _graph_facts(tmp_path, ranks)
    plain, lensed = facts["plain"], facts["lensed"]
    assert len(lensed["collectives"]) == len(plain["collectives"]) == 6  # 3 kernels, 3 biases
    assert plain["ordered"] == []  # Horovod's own graph: the allreduces are independent
    assert lensed["ordered"] == plain["ordered"]
    assert lensed["before_collective"] == []
    if ranks == 1:  # the branch path: hooks inside the conds made them stateful Ifs
        assert "If" in facts["ailens_op_types"]
    else:  # the slate path: two stamps per collective, each free of the others
        assert "Timestamp" in facts["ailens_op_types"]
        assert len(lensed["stamps"]) == 2 * len(lensed["collectives"])
        for name, stamp in lensed["stamps"].items():
            assert stamp["independent"] and stamp["waits_for"] == [], name
