#!/usr/bin/env bash
# Install Horovod (PyTorch + TensorFlow + Gloo, CPU only, no MPI) into the ailens venv from a
# wheel built once per machine. Horovod 0.28.1, the newest release, has no wheel and its sdist
# does not build against torch 2.x / TensorFlow 2.21 as released: the PATCHES table below fixes
# that.
#
#   scripts/build_horovod.sh            # install; compile first if the wheelhouse lacks the wheel
#   scripts/build_horovod.sh --force    # compile again and reinstall, even if all is in place
#   scripts/build_horovod.sh --smoke    # also run the 2-rank smoke test after an install
#   scripts/build_horovod.sh --no-smoke # skip the 2-rank smoke test even after a compile
#
# Needs the venv with torch and tensorflow-cpu (scripts/setup installs them), and for a compile
# g++ and PyPI for the sdist. Environment: AILENS_VENV (default $REPO/.venv), AILENS_WHEELHOUSE
# (default ~/.cache/ailens/wheelhouse).
#
# Idempotent: does nothing if the venv's Horovod imports and carries the Keras patch. Otherwise
# it installs the wheel from $AILENS_WHEELHOUSE/<key>/ with `pip install --find-links`, where the
# key names the Horovod, torch, TensorFlow and Python versions and a hash of PATCHES and
# BUILD_ENV; when that folder has no wheel it downloads the sdist, patches it and
# `pip wheel`s it there first (~5 min on 2 cores). Versions come from constraints.txt.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(realpath -m "${AILENS_VENV:-$REPO/.venv}")"
PY="$VENV/bin/python"
CONSTRAINTS="$REPO/constraints.txt"
WHEELHOUSE="$(realpath -m "${AILENS_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/ailens/wheelhouse}")"
FORCE=0
SMOKE=auto # auto: run the 2-rank horovodrun smoke test only after a fresh compile
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --smoke) SMOKE=1 ;;
    --no-smoke) SMOKE=0 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build_horovod.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done

die() { echo "build_horovod.sh: ERROR: $*" >&2; exit 1; }
log() { echo "[build_horovod] $*"; }
pin() { sed -n "s/^$1==\([^ #]*\).*/\1/p" "$CONSTRAINTS"; }

HOROVOD_VERSION="$(pin horovod)"
[ -n "$HOROVOD_VERSION" ] || die "no horovod==VERSION line in $CONSTRAINTS"

# The changes to the sdist, applied by apply_patches: in FILE, the text OLD (which must occur
# exactly once) becomes NEW. Changing FILE, OLD or NEW changes the wheelhouse key: the next run
# rebuilds.
#   FILE | OLD | NEW | WHY
PATCHES='
CMakeLists.txt | set(CMAKE_CXX_STANDARD 14) | set(CMAKE_CXX_STANDARD 17) | torch >= 2.1 headers need C++17; the top level forces C++14 on every source
horovod/torch/CMakeLists.txt | set(CMAKE_CXX_STANDARD 14) | set(CMAKE_CXX_STANDARD 17) | the PyTorch extension resets C++14 for torch >= 1.5
horovod/tensorflow/CMakeLists.txt | list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc") |  | XLA custom-call ops only; they include XLA headers that the tensorflow-cpu wheel does not ship
horovod/tensorflow/keras/__init__.py | from keras import backend as K | K = keras.backend | since TF 2.16 `keras` is Keras 3, whose backend has no constant(); `keras` here is tf.keras (tf-keras under TF_USE_LEGACY_KERAS=1)
horovod/tensorflow/keras/callbacks.py | from keras import backend as K | K = keras.backend | same: MetricAverageCallback & co. crashed on Keras 3
'
# CPU-only build with the Gloo controller: no MPI (the venv's MPICH is for mpi4py), no MXNet.
# cmake >= 4 refuses the bundled gloo's cmake_minimum_required(VERSION 2.8.12); the policy
# variable makes it configure with 3.5 policies (older cmake ignores it).
BUILD_ENV=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1
  HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_MXNET=1 CMAKE_POLICY_VERSION_MINIMUM=3.5)

# Quiet TensorFlow's C++ logging; Horovod's tf.keras callbacks need tf-keras behind tf.keras.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
export TF_USE_LEGACY_KERAS=1
export PATH="$VENV/bin:$PATH"

[ -x "$PY" ] || die "no venv at $VENV (run scripts/setup first, or set AILENS_VENV)"

# The Keras patch must be in the installed copy too: an unpatched Horovod imports fine, and its
# tf.keras callbacks crash later.
installed_ok() {
  HOROVOD_VERSION="$HOROVOD_VERSION" "$PY" - <<'EOF' >/dev/null 2>&1
import os, pathlib, horovod
assert horovod.__version__ == os.environ["HOROVOD_VERSION"], horovod.__version__
import horovod.torch, horovod.tensorflow, horovod.tensorflow.keras
src = pathlib.Path(horovod.__file__).parent / "tensorflow" / "keras" / "callbacks.py"
assert "from keras import backend as K" not in src.read_text()
EOF
}

if [ "$FORCE" = 0 ] && installed_ok; then
  log "horovod $HOROVOD_VERSION (torch + tensorflow) already installed in $VENV; nothing to do"
  exit 0
fi

# The wheel links against this torch and TensorFlow: their versions are part of the key.
dist_version() { # dist_version NAME... -> version of the first one installed (metadata, no import)
  "$PY" - "$@" <<'EOF' 2>/dev/null
import importlib.metadata as m, sys
for name in sys.argv[1:]:
    try:
        print(m.version(name).split("+")[0]); break
    except m.PackageNotFoundError:
        pass
else:
    sys.exit(1)
EOF
}
TORCH_V="$(dist_version torch)" || die "torch is not installed in $VENV (run scripts/setup first)"
TF_V="$(dist_version tensorflow-cpu tensorflow)" \
  || die "tensorflow is not installed in $VENV (run scripts/setup without --minimal first)"
PY_TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
RECIPE_HASH="$( (cut -d'|' -f1-3 <<<"$PATCHES"; printf '%s\n' "${BUILD_ENV[@]}") | sha256sum | cut -c1-10)"
WHEEL_DIR="$WHEELHOUSE/horovod-$HOROVOD_VERSION-torch$TORCH_V-tf$TF_V-$PY_TAG-$RECIPE_HASH"
LOG="$WHEELHOUSE/horovod-build.log"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

apply_patches() { # apply_patches SRC_DIR: every PATCHES row, each checked
  PATCHES="$PATCHES" "$PY" - "$1" <<'EOF'
import os, pathlib, sys
src = pathlib.Path(sys.argv[1])
for row in os.environ["PATCHES"].strip().splitlines():
    name, old, new, why = (cell.strip() for cell in row.split(" | "))
    path = src / name
    found = path.read_text().count(old)
    if found != 1:
        sys.exit(f"patch target in {name}: '{old}' found {found} times, expected once ({why})."
                 " Has the sdist changed?")
    path.write_text(path.read_text().replace(old, new))
    if old in path.read_text() or new not in path.read_text():
        sys.exit(f"patch did not apply to {name}: '{old}' -> '{new}'")
    print(f"[build_horovod]   patched {name}: {why}")
EOF
}

build_wheel() {
  command -v g++ >/dev/null || command -v c++ >/dev/null \
    || die "no C++ compiler (apt-get install g++; scripts/setup --horovod does it as root)"
  # Build requirements: the build runs without isolation so it sees the venv's torch and TF.
  "$PY" -m pip install -q -c "$CONSTRAINTS" cmake setuptools wheel packaging
  log "downloading the horovod==$HOROVOD_VERSION sdist"
  "$PY" -m pip download -q -c "$CONSTRAINTS" --no-deps --no-binary :all: \
    "horovod==$HOROVOD_VERSION" -d "$WORK/dl"
  tar -xzf "$WORK/dl/horovod-$HOROVOD_VERSION.tar.gz" -C "$WORK"
  apply_patches "$WORK/horovod-$HOROVOD_VERSION"
  log "compiling into $WHEEL_DIR (~5 min on 2 cores; log: $LOG)"
  mkdir -p "$WHEELHOUSE"
  local start; start=$(date +%s)
  # GPU variables unset: CPU only even where a CUDA toolkit is installed.
  if ! env -u HOROVOD_GPU -u HOROVOD_GPU_OPERATIONS -u HOROVOD_GPU_ALLREDUCE \
      -u HOROVOD_GPU_ALLGATHER -u HOROVOD_GPU_BROADCAST -u HOROVOD_GPU_ALLTOALL \
      -u HOROVOD_GPU_REDUCESCATTER -u HOROVOD_WITH_MPI "${BUILD_ENV[@]}" \
      HOROVOD_CMAKE="$VENV/bin/cmake" MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}" \
      "$PY" -m pip wheel -v --no-deps --no-build-isolation -c "$CONSTRAINTS" \
      -w "$WORK/wheel" "$WORK/horovod-$HOROVOD_VERSION" >"$LOG" 2>&1; then
    tail -n 60 "$LOG" >&2
    die "building the Horovod wheel failed (full log: $LOG)"
  fi
  # Move in only a finished wheel, so an interrupted build never leaves a half one behind.
  rm -rf "$WHEEL_DIR" && mkdir -p "$WHEEL_DIR"
  mv "$WORK"/wheel/horovod-*.whl "$WHEEL_DIR/"
  log "compiled in $(($(date +%s) - start))s: $(ls "$WHEEL_DIR")"
}

if [ "$FORCE" = 1 ] || ! ls "$WHEEL_DIR"/horovod-*.whl >/dev/null 2>&1; then
  build_wheel
  [ "$SMOKE" = auto ] && SMOKE=1
else
  log "using the wheel in $WHEEL_DIR (no compile)"
  [ "$SMOKE" = auto ] && SMOKE=0
fi

# Uninstall first: pip calls an installed horovod of the same version "already satisfied".
# --only-binary: never fall back to building PyPI's unpatched sdist.
"$PY" -m pip uninstall -y -q horovod >/dev/null 2>&1 || true
"$PY" -m pip install -q -c "$CONSTRAINTS" --only-binary horovod --find-links "$WHEEL_DIR" \
  "horovod==$HOROVOD_VERSION" || die "pip install from $WHEEL_DIR failed"

# --- verify -----------------------------------------------------------------------------------
installed_ok || die "horovod installed but 'import horovod.torch, horovod.tensorflow' fails"
CHECK="$("$VENV/bin/horovodrun" --check-build 2>/dev/null)" || die "horovodrun --check-build failed"
for want in "\[X\] TensorFlow" "\[X\] PyTorch" "\[X\] Gloo"; do
  grep -q "$want" <<<"$CHECK" || { echo "$CHECK" >&2; die "horovodrun --check-build lacks $want"; }
done
log "horovodrun --check-build: TensorFlow, PyTorch and Gloo are built in"

smoke() { # smoke FRAMEWORK PYTHON-CODE: 2-rank Gloo allreduce of ones(3) must give 2.0 on both ranks
  local out
  out="$(cd "$WORK" && timeout 300 "$VENV/bin/horovodrun" --gloo -np 2 -H localhost:2 "$PY" -c "$2" 2>&1)" \
    || { echo "$out" >&2; die "horovod.$1 2-rank smoke test failed"; }
  [ "$(grep -c 'SMOKE [01] \[2.0, 2.0, 2.0\]' <<<"$out")" = 2 ] \
    || { echo "$out" >&2; die "horovod.$1 smoke test: unexpected output"; }
}
if [ "$SMOKE" = 1 ]; then
  log "smoke test: 2-rank allreduce with horovod.torch and horovod.tensorflow (Gloo)"
  smoke torch 'import torch, horovod.torch as hvd; hvd.init(); print("SMOKE", hvd.rank(), hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist())'
  smoke tensorflow 'import tensorflow as tf, horovod.tensorflow as hvd; hvd.init(); print("SMOKE", hvd.rank(), hvd.allreduce(tf.ones(3), op=hvd.Sum).numpy().tolist())'
  log "smoke test passed (torch and tensorflow, 2 ranks)"
fi
log "horovod $HOROVOD_VERSION ready in $VENV (run with: TF_USE_LEGACY_KERAS=1 $VENV/bin/horovodrun --gloo -np 2 -H localhost:2 ...)"
