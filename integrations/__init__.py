"""Framework adapters: one thin module per framework, imported as ``ailens.integrations.<name>``.

Importing this package imports no framework; importing one of its modules is the opt-in:

- ``ailens.integrations.torch.attach(model, optimizer)`` — PyTorch DDP and torch.distributed
- ``ailens.integrations.mpi.wrap(comm)`` — mpi4py communicators
- ``ailens.integrations.horovod.attach(hvd)`` — Horovod (PyTorch / TensorFlow)
- ``ailens.integrations.keras.LensCallback()`` — Keras, tf.distribute, horovod.tensorflow.keras

Each adapter only translates the framework's hooks into Lens calls. What they share: ``_base``
(``Attachment``, exported here: an adapter's handle on a Lens -- lifecycle, the recorded call,
one patch registry, fail-open through ``lens.disable``, inferred steps, rank-0 notices),
``_callbacks`` (what the Lightning and Hugging Face callbacks share), ``tfgraph`` (recording
TensorFlow collectives inside ``tf.function`` graphs; public for a script that records a TF
collective of its own) and ``_tfdistribute`` (tf.distribute strategies). Step inference itself
is in the core (``ailens.record.steps``).

The one line is enough: where the framework marks no step (a TensorFlow custom loop, a plain
mpi4py loop) steps are inferred from the repeating collectives; the run ends, its last step
included, at ``close()``, at the framework's teardown (``destroy_process_group``,
``hvd.shutdown``, the end of ``fit``) or at interpreter exit; the total step count comes from
the framework when it knows it, else from the run when it ends on its own.
"""

from ._base import Attachment

__all__ = ["Attachment"]
