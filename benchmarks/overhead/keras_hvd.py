"""The mnist example with tf-keras + horovod.tensorflow.keras (batch 32 per rank), A/B: plain
``fit`` vs ``fit(callbacks=[..., LensCallback(...)])`` (see ``_keras_ab``)."""

from __future__ import annotations

from _keras_ab import parse_args, run_case

CASE = {
    "name": "keras_hvd",
    "framework": "keras+horovod",
    "launcher": "horovodrun",
    "ranks": 2,
    "requires": ["tf_keras", "horovod.tensorflow.keras"],
}

if __name__ == "__main__":
    run_case(CASE, parse_args(__doc__), horovod=True)
