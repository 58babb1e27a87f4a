"""Framework adapters: one thin module per framework, imported as ``ailens.integrations.<name>``.

Importing this package imports no framework; importing one of its modules is the opt-in:

- ``ailens.integrations.torch.attach(model, optimizer)`` — PyTorch DDP and torch.distributed
- ``ailens.integrations.mpi.wrap(comm)`` — mpi4py communicators
- ``ailens.integrations.horovod.attach(hvd)`` — Horovod (PyTorch / TensorFlow)
- ``ailens.integrations.keras.LensCallback()`` — Keras, tf.distribute, horovod.tensorflow.keras

Each adapter only translates the framework's hooks into Lens calls; analysis lives in the core.
"""
