#!/usr/bin/env bash
# On a lent device machine (no internet): ailens installed with `pip install --no-deps` into the
# machine's own python3 environment (its torch with CUDA, torchvision, transformers, Lightning;
# editable, so the examples and benchmarks run from this checkout), and what that environment
# lacks from wheels carried in .whl/ (MPICH + mpi4py for mpiexec, setuptools for the build; get
# them with `pip download` as docs/setup.md says). The machine is bare each time: its own
# environment is changed. Idempotent.
#
#   source benchmarks/device/setup.sh    # sets PY (that python) and PATH
# (sourced: sets no shell options of its caller)
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$(python3 -c 'import sys; print(sys.executable)')"
BIN="$(dirname "$PY")"
if ! "$PY" -c 'import ailens.integrations' 2>/dev/null; then
  if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-cache-dir "$REPO"/.whl/*.whl
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e "$REPO" \
    || echo "setup: the editable install of ailens failed" >&2
fi
export PY PATH="$BIN:$PATH" AILENS_VENV="$(dirname "$BIN")" PYTHONUNBUFFERED=1
"$PY" -c 'import ailens, ailens.integrations, ailens.record as r, torch; print("ailens", ailens.__version__, "recorder", r.IMPLEMENTATION, "torch", torch.__version__, "cuda", torch.cuda.is_available())'
ls "$BIN" | grep -E '^(mpiexec|torchrun)$' | tr '\n' ' '; echo
