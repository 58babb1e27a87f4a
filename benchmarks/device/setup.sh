#!/usr/bin/env bash
# On a lent device machine (no internet): a venv over the machine's own python3 (its torch with
# CUDA, torchvision, transformers, Lightning), ailens installed into it with
# `pip install --no-deps` (editable: the examples and benchmarks run from this checkout), and
# what the machine lacks from wheels carried in .whl/ (MPICH + mpi4py, setuptools for the
# build). Prints the venv's python. Idempotent.
#
#   source benchmarks/device/setup.sh    # sets PY (the venv's python) and PATH
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
V="${AILENS_DEVICE_VENV:-/tmp/ailens-venv}"
if [ ! -x "$V/bin/python" ]; then
  python3 -m venv --system-site-packages "$V"
  if compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    "$V/bin/python" -m pip install -q --no-index --no-deps --no-cache-dir "$REPO"/.whl/*.whl
  fi
  "$V/bin/python" -m pip install -q --no-index --no-deps --no-build-isolation -e "$REPO" \
    || echo "setup: the editable install failed; ailens runs from PYTHONPATH without its C hot path" >&2
  # torchrun beside the venv's python, so that ranks run the venv's interpreter
  printf '#!%s\nfrom torch.distributed.run import main\nmain()\n' "$V/bin/python" >"$V/bin/torchrun"
  chmod +x "$V/bin/torchrun"
fi
export PY="$V/bin/python" PATH="$V/bin:$PATH" AILENS_VENV="$V" PYTHONUNBUFFERED=1
"$PY" -c 'import ailens, ailens.record as r, torch; print("ailens", ailens.__version__, "recorder", r.IMPLEMENTATION, "torch", torch.__version__, "cuda", torch.cuda.is_available())'
