"""The mnist example with plain tf-keras in one process (batch 32), A/B: plain ``fit`` vs
``fit(callbacks=[LensCallback(...)])`` (see ``_keras_ab``)."""

from __future__ import annotations

from _keras_ab import parse_args, run_case

CASE = {
    "name": "keras_plain",
    "framework": "keras",
    "launcher": "python",
    "ranks": 1,
    "requires": ["tf_keras"],
}

if __name__ == "__main__":
    run_case(CASE, parse_args(__doc__), horovod=False)
