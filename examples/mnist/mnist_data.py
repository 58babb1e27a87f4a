"""MNIST from local IDX files, or scikit-learn's bundled 8x8 digits; nothing is downloaded.

IDX (http://yann.lecun.com/exdb/mnist/): ``00 00 <type> <ndim>``, then ``ndim`` big-endian
uint32 sizes, then the data big-endian. Files may be gzipped (``.gz``).
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

# IDX type byte -> big-endian numpy dtype.
IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

# The four MNIST files, matched loosely ("train-images-idx3-ubyte", "train-images.idx3-ubyte",
# with or without ".gz").
IDX_NAMES = {
    "train_images": "train-images*idx3*",
    "train_labels": "train-labels*idx1*",
    "test_images": "t10k-images*idx3*",
    "test_labels": "t10k-labels*idx1*",
}


class IdxError(ValueError):
    """An IDX file that does not parse; the message names the file."""


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (optionally gzipped) into an array of its declared type and shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise IdxError(f"{path}: not an IDX file (bad magic {data[:4]!r})")
    kind, ndim = data[2], data[3]
    if kind not in IDX_TYPES:
        raise IdxError(f"{path}: unknown IDX data type 0x{kind:02x}")
    head = 4 + 4 * ndim
    if len(data) < head:
        raise IdxError(f"{path}: truncated header")
    shape = struct.unpack(f">{ndim}I", data[4:head])
    dtype = np.dtype(IDX_TYPES[kind])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - head != expected:
        raise IdxError(f"{path}: {len(data) - head} data bytes, shape {shape} needs {expected}")
    return np.frombuffer(data, dtype, offset=head).reshape(shape).astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write an array as IDX (gzipped when the name ends in .gz); the inverse of read_idx."""
    path = Path(path)
    codes = {np.dtype(v).newbyteorder("="): k for k, v in IDX_TYPES.items()}
    kind = codes[array.dtype.newbyteorder("=")]
    body = bytes([0, 0, kind, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    body += np.ascontiguousarray(array, dtype=IDX_TYPES[kind]).tobytes()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(body)


def load_idx_dir(idx_dir: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The four MNIST IDX files of a directory: (x_train, y_train, x_test, y_test), images
    as float32 in [0, 1] of shape (n, 28, 28, 1), labels int64."""
    idx_dir = Path(idx_dir)
    found = {}
    for key, pattern in IDX_NAMES.items():
        matches = sorted(idx_dir.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"{idx_dir}: no {pattern} file (the MNIST IDX files)")
        found[key] = read_idx(matches[0])
    for split in ("train", "test"):
        n_img, n_lab = len(found[f"{split}_images"]), len(found[f"{split}_labels"])
        if n_img != n_lab:
            raise IdxError(f"{idx_dir}: {n_img} {split} images but {n_lab} labels")
    return (_images(found["train_images"]), found["train_labels"].astype(np.int64),
            _images(found["test_images"]), found["test_labels"].astype(np.int64))


def load_digits_28(test_fraction: float = 0.2) -> tuple[np.ndarray, ...]:
    """scikit-learn's bundled 8x8 digits (1797 images), upsampled 3x and padded to 28x28 so
    the model is the MNIST one: (x_train, y_train, x_test, y_test)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    img = digits.images.astype(np.float32) / 16.0
    img = np.kron(img, np.ones((3, 3), np.float32))          # 24x24
    img = np.pad(img, ((0, 0), (2, 2), (2, 2)))[..., None]   # 28x28x1
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(img))
    cut = int(len(img) * (1 - test_fraction))
    train, test = order[:cut], order[cut:]
    return img[train], labels[train], img[test], labels[test]


def load(idx_dir: str | Path | None = None) -> tuple[np.ndarray, ...]:
    """MNIST from ``idx_dir`` when given, else the bundled digits."""
    return load_idx_dir(idx_dir) if idx_dir else load_digits_28()


def shard(x: np.ndarray, y: np.ndarray, rank: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's equal share (every rank gets the same number of samples, so every rank
    runs the same number of steps and collectives)."""
    n = len(x) // size * size
    return x[rank:n:size], y[rank:n:size]


def _images(raw: np.ndarray) -> np.ndarray:
    return (raw.astype(np.float32) / 255.0)[..., None]
