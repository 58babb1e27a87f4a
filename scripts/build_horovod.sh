#!/usr/bin/env bash
# Build Horovod 0.28.1 (PyTorch + TensorFlow + Gloo, CPU only, no MPI) from the PyPI sdist and
# install it into the ailens venv. Horovod 0.28.1 is the newest release and does not build
# against torch 2.x / TensorFlow 2.21 as released, so the sdist is patched first (see PATCHES
# below and docs/setup.md).
#
#   scripts/build_horovod.sh            # build + install into ${AILENS_VENV:-$REPO/.venv}
#   scripts/build_horovod.sh --force    # rebuild/reinstall even if Horovod already imports
#   scripts/build_horovod.sh --smoke    # also run the 2-rank smoke test after a cached install
#   scripts/build_horovod.sh --no-smoke # skip the 2-rank smoke test even after a compile
#
# Needs: the venv with torch==2.13.0 and tensorflow-cpu already installed (scripts/setup does
# that), a C++ compiler (g++), and network access to PyPI for the sdist.
#
# Idempotent: if `import horovod.torch, horovod.tensorflow` already works in the venv (and the
# installed copy carries our Keras patch) it does nothing. Otherwise the patched sdist is
# written, byte for byte reproducibly, to a stable path under ~/.cache/ailens keyed by the
# Horovod/torch/TF/Python versions, and installed with `pip install "horovod @ file://...#sha256=..."`.
# pip keys its wheel cache on that URL + hash, so the ~5 minute compile happens once per
# machine: every later install into any venv (e.g. CI's fresh clone) reuses the cached wheel.
set -euo pipefail

HOROVOD_VERSION=0.28.1
# Bump when the patch set below changes: it is part of the cache key (new path -> new build).
PATCH_LEVEL=p1

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$(realpath -m "${AILENS_VENV:-$REPO/.venv}")"
PY="$VENV/bin/python"
FORCE=0
SMOKE=auto   # auto: run the 2-rank horovodrun smoke test only after a fresh compile
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

# Quiet TensorFlow's C++ logging in every Python we start; Horovod's tf.keras callbacks need
# the tf-keras (Keras 2) implementation behind tf.keras.
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
export TF_USE_LEGACY_KERAS=1
export PATH="$VENV/bin:$PATH"

[ -x "$PY" ] || die "no venv at $VENV (run scripts/setup first, or set AILENS_VENV)"

# The Keras patch (P4 below) must be in the installed copy too, else a plain `import` check
# would accept an unpatched Horovod whose tf.keras callbacks crash.
installed_ok() {
  "$PY" - <<'EOF' >/dev/null 2>&1
import pathlib, horovod
assert horovod.__version__ == "0.28.1", horovod.__version__
import horovod.torch, horovod.tensorflow
src = pathlib.Path(horovod.__file__).parent / "tensorflow" / "keras" / "callbacks.py"
assert "from keras import backend as K" not in src.read_text()
EOF
}

if [ "$FORCE" = 0 ] && installed_ok; then
  log "horovod $HOROVOD_VERSION (torch + tensorflow) already installed in $VENV; nothing to do"
  exit 0
fi

# --- prerequisites ---------------------------------------------------------------------------
# Versions from package metadata (no slow framework import); they are part of the cache key.
dist_version() { # dist_version NAME... -> version of the first one installed
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
TORCH_V="$(dist_version torch)" \
  || die "torch is not installed in $VENV (run scripts/setup first; it installs torch==2.13.0)"
TF_V="$(dist_version tensorflow-cpu tensorflow)" \
  || die "tensorflow is not installed in $VENV (run scripts/setup without --minimal first)"
PY_TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
command -v g++ >/dev/null || command -v c++ >/dev/null \
  || die "no C++ compiler (apt-get install g++; scripts/setup --horovod does it when root)"
"$PY" -m pip cache dir >/dev/null 2>&1 \
  || log "WARNING: pip's cache is disabled (PIP_NO_CACHE_DIR?); every install will recompile"

# Build requirements (we build with --no-build-isolation so the build sees the venv's torch
# and tensorflow). cmake>=3.13 is what Horovod's setup.py asks for; the pip wheel is fine.
# The constraint keeps pip from ever touching the installed torch / tensorflow.
CONSTRAINTS="$(mktemp)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK" "$CONSTRAINTS"' EXIT
printf 'torch==%s\ntensorflow-cpu==%s\n' "$TORCH_V" "$TF_V" >"$CONSTRAINTS"
if ! "$PY" -c 'import setuptools, wheel, packaging' 2>/dev/null || [ ! -x "$VENV/bin/cmake" ]; then
  log "installing build requirements (cmake, setuptools, wheel, packaging)"
  "$PY" -m pip install -q -c "$CONSTRAINTS" "cmake>=3.13" "setuptools>=68" wheel packaging
fi

KEY="horovod-$HOROVOD_VERSION-$PATCH_LEVEL-torch$TORCH_V-tf$TF_V-$PY_TAG"
CACHE_ROOT="${AILENS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ailens}"
SRC_DIR="$CACHE_ROOT/horovod-src/$KEY"
TARBALL="$SRC_DIR/horovod-$HOROVOD_VERSION.tar.gz"

# --- patched sdist ----------------------------------------------------------------------------
# Fail loudly if a pattern we patch is not there (a different sdist, or a patch gone stale).
need() { # need FILE FIXED-STRING WHY
  grep -qF -- "$2" "$1" || die "patch target missing in ${1#"$WORK"/}: '$2' ($3). Has the sdist changed?"
}
applied() { # applied FILE CHECK-DESCRIPTION COMMAND...
  local f="$1" what="$2"; shift 2
  "$@" || die "patch did not apply to ${f#"$WORK"/}: $what"
}

make_patched_sdist() {
  log "downloading horovod==$HOROVOD_VERSION sdist from PyPI"
  "$PY" -m pip download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$WORK/dl"
  local sdist="$WORK/dl/horovod-$HOROVOD_VERSION.tar.gz"
  [ -f "$sdist" ] || die "pip download did not produce $sdist"
  log "sdist sha256 $(sha256sum "$sdist" | cut -d' ' -f1)"
  tar -xzf "$sdist" -C "$WORK"
  local S="$WORK/horovod-$HOROVOD_VERSION"

  # P1: torch >= 2.1 headers need C++17; the top-level CMakeLists forces C++14 for everything.
  need "$S/CMakeLists.txt" "set(CMAKE_CXX_STANDARD 14)" "top-level C++ standard"
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$S/CMakeLists.txt"
  applied "$S/CMakeLists.txt" "C++17 at top level" \
    grep -qF "set(CMAKE_CXX_STANDARD 17)" "$S/CMakeLists.txt"
  applied "$S/CMakeLists.txt" "no C++14 left" \
    bash -c "! grep -qF 'set(CMAKE_CXX_STANDARD 14)' '$S/CMakeLists.txt'"

  # P2: same for the PyTorch extension, which resets the standard to 14 for torch >= 1.5.
  need "$S/horovod/torch/CMakeLists.txt" "set(CMAKE_CXX_STANDARD 14)" "torch C++ standard"
  sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$S/horovod/torch/CMakeLists.txt"
  applied "$S/horovod/torch/CMakeLists.txt" "no C++14 left" \
    bash -c "! grep -qF 'set(CMAKE_CXX_STANDARD 14)' '$S/horovod/torch/CMakeLists.txt'"

  # P3: xla_mpi_ops.cc is only the XLA custom-call path (HOROVOD_ENABLE_XLA_OPS); it includes
  # XLA service headers that the tensorflow-cpu wheel does not ship, so it cannot compile.
  need "$S/horovod/tensorflow/CMakeLists.txt" "xla_mpi_ops.cc" "XLA op source"
  sed -i '/xla_mpi_ops\.cc/d' "$S/horovod/tensorflow/CMakeLists.txt"
  applied "$S/horovod/tensorflow/CMakeLists.txt" "xla_mpi_ops.cc removed" \
    bash -c "! grep -qF xla_mpi_ops.cc '$S/horovod/tensorflow/CMakeLists.txt'"

  # P4: for TF >= 2.6 horovod.tensorflow.keras does `from keras import backend as K`. Since
  # TF 2.16 the `keras` package is Keras 3, whose backend has no constant()/get_value(), so
  # MetricAverageCallback & co. crash even with TF_USE_LEGACY_KERAS=1. Use the backend of
  # tf.keras (the `keras` name those modules already import from tensorflow), which is
  # tf-keras when TF_USE_LEGACY_KERAS=1.
  local f
  for f in "$S/horovod/tensorflow/keras/__init__.py" "$S/horovod/tensorflow/keras/callbacks.py"; do
    need "$f" "from keras import backend as K" "Keras backend import"
    need "$f" "from tensorflow import keras" "tf.keras import"
    sed -i 's/^\([[:space:]]*\)from keras import backend as K$/\1K = keras.backend/' "$f"
    applied "$f" "Keras backend import replaced" \
      bash -c "! grep -qF 'from keras import backend as K' '$f' && grep -qF 'K = keras.backend' '$f'"
  done

  # Re-pack reproducibly (sorted, fixed mtime/owner, gzip -n): the same patches always give the
  # same sha256, so a lost tarball re-created later still hits pip's wheel cache.
  mkdir -p "$SRC_DIR"
  tar --sort=name --mtime='2000-01-01 00:00:00 UTC' --owner=0 --group=0 --numeric-owner \
      -C "$WORK" -cf - "horovod-$HOROVOD_VERSION" | gzip -n -9 >"$WORK/patched.tar.gz"
  mv "$WORK/patched.tar.gz" "$TARBALL"
}

if [ -s "$TARBALL" ] && tar -tzf "$TARBALL" >/dev/null 2>&1; then
  log "reusing patched sdist $TARBALL"
else
  make_patched_sdist
  log "patched sdist written to $TARBALL"
fi
SHA="$(sha256sum "$TARBALL" | cut -d' ' -f1)"

# --- build + install --------------------------------------------------------------------------
# CPU-only build with the Gloo controller: no MPI (the venv's MPICH is for mpi4py), no MXNet,
# no GPU ops even if a CUDA toolkit happens to be installed.
unset HOROVOD_GPU HOROVOD_GPU_OPERATIONS HOROVOD_GPU_ALLREDUCE HOROVOD_GPU_ALLGATHER \
      HOROVOD_GPU_BROADCAST HOROVOD_GPU_ALLTOALL HOROVOD_GPU_REDUCESCATTER HOROVOD_WITH_MPI
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1
export HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_MXNET=1
export HOROVOD_CMAKE="$VENV/bin/cmake"
export MAKEFLAGS="${MAKEFLAGS:--j$(nproc 2>/dev/null || echo 2)}"
# cmake >= 4 refuses the bundled gloo's cmake_minimum_required(VERSION 2.8.12); this asks it
# to configure with 3.5 policies instead (ignored by older cmake).
export CMAKE_POLICY_VERSION_MINIMUM=3.5

log "installing horovod from $TARBALL (sha256 $SHA); a cold build takes ~5 min on 2 cores"
LOG="$WORK/pip-install.log"
start=$(date +%s)
# Remove any old/broken copy first: pip would otherwise call an installed horovod==0.28.1
# "already satisfied" and skip the (re)install.
"$PY" -m pip uninstall -y -q horovod >/dev/null 2>&1 || true
# The requirement must be *named* ("horovod @ URL"): pip consults its wheel cache only for
# requirements whose name it knows before building.
if ! "$PY" -m pip install -v --no-build-isolation -c "$CONSTRAINTS" \
      "horovod @ file://$TARBALL#sha256=$SHA" >"$LOG" 2>&1; then
  tail -n 60 "$LOG" >&2
  cp "$LOG" "$CACHE_ROOT/horovod-build-failed.log" 2>/dev/null || true
  die "pip install of the patched Horovod failed (full log: $CACHE_ROOT/horovod-build-failed.log)"
fi
cp "$LOG" "$CACHE_ROOT/horovod-install.log" 2>/dev/null || true
if grep -q "Building wheel for horovod" "$LOG"; then
  log "built and installed in $(( $(date +%s) - start ))s (the wheel is now in pip's cache)"
  if [ "$SMOKE" = auto ]; then SMOKE=1; fi
else
  log "installed from pip's wheel cache in $(( $(date +%s) - start ))s (no compile)"
  if [ "$SMOKE" = auto ]; then SMOKE=0; fi
fi

# --- verify -----------------------------------------------------------------------------------
installed_ok || die "horovod installed but 'import horovod.torch, horovod.tensorflow' fails"
CHECK="$("$VENV/bin/horovodrun" --check-build 2>/dev/null)" || die "horovodrun --check-build failed"
for want in "\[X\] TensorFlow" "\[X\] PyTorch" "\[X\] Gloo"; do
  grep -q "$want" <<<"$CHECK" || { echo "$CHECK" >&2; die "horovodrun --check-build lacks $want"; }
done
log "horovodrun --check-build: TensorFlow, PyTorch and Gloo are built in"

if [ "$SMOKE" = 1 ]; then
  log "smoke test: 2-rank allreduce with horovod.torch and horovod.tensorflow (Gloo)"
  out="$(cd "$WORK" && timeout 300 "$VENV/bin/horovodrun" --gloo -np 2 -H localhost:2 "$PY" -c \
    'import torch, horovod.torch as hvd; hvd.init(); print("SMOKE", hvd.rank(), hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist())' 2>&1)" \
    || { echo "$out" >&2; die "horovod.torch 2-rank smoke test failed"; }
  [ "$(grep -c 'SMOKE [01] \[2.0, 2.0, 2.0\]' <<<"$out")" = 2 ] \
    || { echo "$out" >&2; die "horovod.torch smoke test: unexpected output"; }
  out="$(cd "$WORK" && timeout 300 "$VENV/bin/horovodrun" --gloo -np 2 -H localhost:2 "$PY" -c \
    'import tensorflow as tf, horovod.tensorflow as hvd; hvd.init(); print("SMOKE", hvd.rank(), hvd.allreduce(tf.ones(3), op=hvd.Sum).numpy().tolist())' 2>&1)" \
    || { echo "$out" >&2; die "horovod.tensorflow 2-rank smoke test failed"; }
  [ "$(grep -c 'SMOKE [01] \[2.0, 2.0, 2.0\]' <<<"$out")" = 2 ] \
    || { echo "$out" >&2; die "horovod.tensorflow smoke test: unexpected output"; }
  log "smoke test passed (torch and tensorflow, 2 ranks)"
fi
log "horovod $HOROVOD_VERSION ready in $VENV (run with: TF_USE_LEGACY_KERAS=1 $VENV/bin/horovodrun --gloo -np 2 -H localhost:2 ...)"
