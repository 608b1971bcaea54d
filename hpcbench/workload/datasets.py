"""Datasets held in memory, each registered once (``register_dataset``): synthetic and teacher (from
code), digits (shipped by scikit-learn), cifar10 and fashion-mnist (local files).

Nothing is downloaded: digits is read from scikit-learn's installed package data, CIFAR-10 from a
directory the user gives in the standard python pickle format, Fashion-MNIST from Debian's package
``dataset-fashion-mnist`` or a directory of the upstream IDX files.
"""
from __future__ import annotations

import gzip
import importlib.util
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from hpcbench.errors import UsageError
from hpcbench.registry import Registry
from hpcbench.workload import teacher
from hpcbench.workload.idx import read_images, read_labels


@dataclass(frozen=True)
class Dataset:
    """Train, test and (optionally) validation splits as numpy arrays, N×C×H×W images and int64 labels."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: int
    mean: tuple[float, ...]  # per-channel normalisation applied to each batch
    std: tuple[float, ...]
    scale: float  # raw value that maps to 1.0 (255 for uint8 images)
    # Held out from the training set by ``hold_out``: what settings are chosen on, never the test set.
    x_val: np.ndarray = field(default_factory=lambda: np.zeros((0, 1, 1, 1), np.float32))
    y_val: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]

    def normalise(self, x: np.ndarray) -> np.ndarray:
        """Raw stored values of a batch → float32 network input."""
        shape = (1, -1, 1, 1)
        mean = np.asarray(self.mean, np.float32).reshape(shape)
        std = np.asarray(self.std, np.float32).reshape(shape)
        return (x.astype(np.float32) / self.scale - mean) / std


@dataclass(frozen=True)
class Source:
    """Where a dataset comes from: ``--data-dir`` (those read from files), and the dataset's own option
    table (``teacher.*``; None: its defaults)."""

    data_dir: str = ""
    options: Any = None


Loader = Callable[[Source], Dataset]


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset a run can name. ``reads_files``: it reads files from ``--data-dir`` (the others take
    none); ``default_dir``: where it reads them without one ("": ``--data-dir`` is needed);
    ``options``: the dataclass of its option table (``--set NAME.KEY``, a ``[NAME]`` table), if any."""

    text: str
    load: Loader
    reads_files: bool = False
    default_dir: str = ""
    options: type | None = None

    def source(self) -> str:
        """Where its files are read from, in words ("" for a dataset made from code or shipped)."""
        if not self.reads_files:
            return ""
        return f"--data-dir, or {self.default_dir}" if self.default_dir else "--data-dir"


DATASETS: Registry[DatasetSpec] = Registry("dataset")


def register_dataset(name: str, text: str, reads_files: bool = False, default_dir: str = "",
                     options: type | None = None) -> Callable[[Loader], Loader]:
    """Register the decorated loader as dataset ``name``, with its line for ``hpcbench list``."""
    def add(load: Loader) -> Loader:
        DATASETS.register(name)(DatasetSpec(text, load, reads_files, default_dir, options))
        return load

    return add


def file_datasets() -> list[str]:
    """The datasets read from files, which ``--data-dir`` goes with."""
    return [name for name, spec in DATASETS.items() if spec.reads_files]


def split(x: np.ndarray, y: np.ndarray, test: int, seed: int) -> tuple[np.ndarray, ...]:
    order = np.random.default_rng(seed).permutation(len(y))
    te, tr = order[:test], order[test:]
    return x[tr], y[tr], x[te], y[te]


@register_dataset("synthetic", "10 classes of 3x32x32 noisy smooth patterns, 4096 train / 1024 test, made from code")
def load_synthetic(source: Source) -> Dataset:
    # Fixed data seed: runs with different --seed see the same data, as with a real dataset.
    rng = np.random.default_rng(20201909)
    classes, n_train, n_test, shape = 10, 4096, 1024, (3, 32, 32)
    coarse = rng.normal(size=(classes, shape[0], 8, 8)).astype(np.float32)
    templates = coarse.repeat(4, axis=2).repeat(4, axis=3)
    n = n_train + n_test
    y = rng.integers(0, classes, size=n)
    x = templates[y] * 0.5 + rng.normal(size=(n,) + shape).astype(np.float32)
    return Dataset("synthetic", x[:n_train], y[:n_train].astype(np.int64), x[n_train:],
                   y[n_train:].astype(np.int64), classes, (0.0,) * 3, (1.0,) * 3, 1.0)


def digits_file() -> Path | None:
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"
    return path if path.is_file() else None


@register_dataset("digits", "scikit-learn's 1,797 8x8 handwritten digits, 1437 train / 360 test")
def load_digits(source: Source) -> Dataset:
    path = digits_file()
    if path is not None:
        # Reading scikit-learn's shipped file directly avoids a 2 s import on every rank.
        with gzip.open(path, "rt") as fh:
            raw = np.loadtxt(fh, delimiter=",", dtype=np.float32)
        x, y = raw[:, :-1], raw[:, -1].astype(np.int64)
    else:
        try:
            from sklearn.datasets import load_digits as sk_load
        except ImportError:
            raise UsageError("dataset 'digits' needs scikit-learn: pip install scikit-learn") from None
        bunch = sk_load()
        x, y = bunch.data.astype(np.float32), bunch.target.astype(np.int64)
    x = x.reshape(-1, 1, 8, 8)
    x_tr, y_tr, x_te, y_te = split(x, y, test=360, seed=0)
    return Dataset("digits", x_tr, y_tr, x_te, y_te, 10, (0.3,), (0.4,), 16.0)


CIFAR_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


# All a CIFAR-10 batch's pickle may ask for: numpy arrays, scalars (labels written as numpy integers) and
# their dtypes (numpy 1 and 2 name the module differently), and the codec Python 3 pickles bytes through.
# Anything else is refused unrun.
CIFAR_PICKLE_NAMES = {(f"numpy.{core}.{module}", name) for core in ("core", "_core")
                      for module, name in (("multiarray", "_reconstruct"), ("multiarray", "scalar"),
                                           ("numeric", "_frombuffer"))}
CIFAR_PICKLE_NAMES |= {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class ArraysOnly(pickle.Unpickler):
    """An unpickler that builds dicts, lists, strings, numbers and numpy arrays and calls nothing else."""

    def find_class(self, module: str, name: str) -> object:
        if (module, name) not in CIFAR_PICKLE_NAMES:
            raise pickle.UnpicklingError(f"it asks for {module}.{name}")
        return super().find_class(module, name)


def read_cifar_batch(path: Path, classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """One pickle batch → (N×3×32×32 uint8 images, N int64 labels), or one line saying what is wrong.
    Read by ``ArraysOnly``: a crafted file cannot run code, not even under ``--dry-run``."""
    with open(path, "rb") as fh:
        try:
            batch = ArraysOnly(fh, encoding="bytes").load()
            data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
        except pickle.UnpicklingError as exc:
            raise UsageError(f"{path} is refused: {exc}, and a CIFAR-10 batch holds only arrays, lists and "
                             "strings") from None
        except Exception:
            raise UsageError(f"{path} is not a CIFAR-10 python pickle batch") from None
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.dtype != np.uint8:
        raise UsageError(f"{path}: data has shape {data.shape} and type {data.dtype}; expected N x 3072 uint8"
                         if data.dtype != np.uint8 else f"{path}: data has shape {data.shape}; expected N x 3072")
    if labels.ndim != 1 or len(labels) != len(data):
        raise UsageError(f"{path}: {len(data)} images but {labels.size} labels")
    if labels.dtype.kind not in "iu":
        raise UsageError(f"{path}: labels are {labels.dtype}, not integers")
    bad = labels[(labels < 0) | (labels >= classes)]
    if bad.size:
        raise UsageError(f"{path}: label {int(bad[0])} is outside 0..{classes - 1}")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


@register_dataset("cifar10", "CIFAR-10, 50,000 train / 10,000 test 3x32x32 images (python pickle format: "
                  "data_batch_1..5, test_batch)", reads_files=True)
def load_cifar10(source: Source) -> Dataset:
    data_dir = source.data_dir
    if not data_dir:
        raise UsageError("dataset 'cifar10' needs --data-dir DIR holding data_batch_1..5 and test_batch")
    root = Path(data_dir)
    missing = [f for f in CIFAR_FILES if not (root / f).is_file()]
    if missing:
        raise UsageError(f"cifar10 data dir {data_dir!r} lacks {', '.join(missing)} "
                         "(expected the python version of CIFAR-10: data_batch_1..5, test_batch)")
    parts = [read_cifar_batch(root / f) for f in CIFAR_FILES[:-1]]
    x_te, y_te = read_cifar_batch(root / "test_batch")
    x_tr = np.concatenate([p[0] for p in parts])
    y_tr = np.concatenate([p[1] for p in parts])
    return Dataset("cifar10", x_tr, y_tr, x_te, y_te, 10,
                   (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), 255.0)


FASHION_DIR = "/usr/share/datasets/fashion-mnist"  # where Debian's package dataset-fashion-mnist puts it
FASHION_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte")


def idx_file(root: Path, name: str) -> Path | None:
    """``root/name.gz`` or ``root/name``, whichever is there (upstream ships the first, gunzip makes the second)."""
    return next((p for p in (root / f"{name}.gz", root / name) if p.is_file()), None)


@register_dataset("fashion-mnist", "Zalando's Fashion-MNIST, 60,000 train / 10,000 test 1x28x28 images of clothing "
                  "(the upstream IDX files, gzipped or not; apt-get install dataset-fashion-mnist)",
                  reads_files=True, default_dir=FASHION_DIR)
def load_fashion_mnist(source: Source) -> Dataset:
    root = Path(source.data_dir or FASHION_DIR)
    found = {name: idx_file(root, name) for name in FASHION_FILES}
    missing = [name for name, path in found.items() if path is None]
    if missing and not source.data_dir:
        raise UsageError(f"dataset 'fashion-mnist' is not in {FASHION_DIR}: apt-get install dataset-fashion-mnist, "
                         "or put the upstream files (train-images-idx3-ubyte.gz, ...) in --data-dir DIR")
    if missing:
        raise UsageError(f"fashion-mnist data dir {source.data_dir!r} lacks {', '.join(missing)} (the upstream IDX "
                         "files, gzipped (.gz) or not)")
    paths = [path for path in found.values() if path is not None]
    x_tr, x_te = read_images(paths[0], 28, 28), read_images(paths[2], 28, 28)
    y_tr, y_te = read_labels(paths[1], 10), read_labels(paths[3], 10)
    for images, labels, x, y in ((paths[0], paths[1], x_tr, y_tr), (paths[2], paths[3], x_te, y_te)):
        if len(x) != len(y):
            raise UsageError(f"{images} holds {len(x):,} images but {labels} {len(y):,} labels")
    return Dataset("fashion-mnist", x_tr, y_tr, x_te, y_te, 10, (0.2860,), (0.3530,), 255.0)


@register_dataset("teacher", "64 Gaussian features (1x8x8), labels from a fixed random teacher network with 5% "
                  "label noise; 50,000 train / 10,000 test (--set teacher.samples=N), made from code",
                  options=teacher.TeacherOptions)
def load_teacher(source: Source) -> Dataset:
    options = source.options or teacher.TeacherOptions()
    x_tr, y_tr = teacher.generate(options.samples, options.noise, stream=0)
    x_te, y_te = teacher.generate(options.test_samples, options.noise, stream=1)
    return Dataset("teacher", x_tr, y_tr, x_te, y_te, teacher.CLASSES, (0.0,), (1.0,), 1.0)


VALIDATION_SEED = 0x7A11D  # one split per dataset and fraction: the same for every --seed, algorithm and size


def hold_out(data: Dataset, fraction: float) -> Dataset:
    """Move ``round(fraction · n)`` training samples, drawn by a fixed seed, to the validation split;
    the rest keep their order. ``fraction`` 0 returns ``data`` as it is."""
    n = len(data.y_train)
    count = round(fraction * n)
    if count == 0:
        return data
    if count >= n:
        raise UsageError(f"val_fraction {fraction:g} leaves no training sample of the {n} in {data.name}")
    held = np.zeros(n, dtype=bool)
    held[np.random.default_rng(VALIDATION_SEED).permutation(n)[:count]] = True
    return replace(data, x_train=data.x_train[~held], y_train=data.y_train[~held],
                   x_val=data.x_train[held], y_val=data.y_train[held])


def load_dataset(name: str, data_dir: str = "", options: Any = None, val_fraction: float = 0.0) -> Dataset:
    """Dataset ``name``, read or made once, with ``val_fraction`` of its training set held out.
    ``options``: its option table (``teacher``'s), None for its defaults."""
    return hold_out(DATASETS.get(name).load(Source(data_dir, options)), val_fraction)
