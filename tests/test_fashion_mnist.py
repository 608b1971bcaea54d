"""Fashion-MNIST: the IDX files checked as outside input (crafted files, always), the real data set where
Debian's package dataset-fashion-mnist is installed, and a run of the small CNN on it."""
from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from hpcbench.errors import UsageError
from hpcbench.results.store import read_run
from hpcbench.workload import datasets
from hpcbench.workload.datasets import FASHION_DIR, FASHION_FILES, load_dataset
from hpcbench.workload.idx import IMAGES_MAGIC, LABELS_MAGIC, MAX_ITEMS

from conftest import cli, mpirun, requires_mpi

TRAIN, TEST = 40, 12


def idx_bytes(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    return struct.pack(f">{1 + len(dims)}I", magic, *dims) + payload


def write(path: Path, raw: bytes, zipped: bool) -> Path:
    """``raw`` at ``path`` (``path.gz``, gzipped, when ``zipped``)."""
    target = path.with_name(path.name + ".gz") if zipped else path
    target.write_bytes(gzip.compress(raw) if zipped else raw)
    return target


def write_set(root: Path, zipped: tuple[bool, bool, bool, bool] = (True,) * 4) -> Path:
    """A small, well-formed Fashion-MNIST: 40 train and 12 test images, labels 0..9; the test images'
    first pixel is the sample's index (to check the order)."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for (images, labels), n, (zip_x, zip_y) in zip(((FASHION_FILES[0], FASHION_FILES[1]),
                                                     (FASHION_FILES[2], FASHION_FILES[3])),
                                                    (TRAIN, TEST), (zipped[:2], zipped[2:])):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        x[:, 0, 0] = np.arange(n)
        write(root / images, idx_bytes(IMAGES_MAGIC, (n, 28, 28), x.tobytes()), zip_x)
        write(root / labels, idx_bytes(LABELS_MAGIC, (n,), (np.arange(n) % 10).astype(np.uint8).tobytes()), zip_y)
    return root


@pytest.mark.parametrize("zipped", [(True,) * 4, (False,) * 4, (True, False, False, True)],
                         ids=["gzipped", "raw", "mixed"])
def test_the_idx_files_are_read_gzipped_or_not(tmp_path, zipped):
    d = load_dataset("fashion-mnist", str(write_set(tmp_path / "f", zipped)))
    assert d.x_train.shape == (TRAIN, 1, 28, 28) and d.x_test.shape == (TEST, 1, 28, 28)
    assert d.x_train.dtype == np.uint8 and d.y_train.dtype == np.int64 and d.classes == 10
    assert list(d.x_test[:, 0, 0, 0]) == list(range(TEST)) and list(d.y_test) == [i % 10 for i in range(TEST)]
    assert (d.mean, d.std, d.scale) == ((0.2860,), (0.3530,), 255.0)


def test_the_validation_split_is_held_out_of_the_training_set(tmp_path):
    d = load_dataset("fashion-mnist", str(write_set(tmp_path / "f")), val_fraction=0.25)
    assert len(d.y_train) == 30 and len(d.y_val) == 10 and len(d.y_test) == TEST
    seen = np.concatenate([d.x_train[:, 0, 0, 0], d.x_val[:, 0, 0, 0]])
    assert sorted(seen.tolist()) == list(range(TRAIN))


def damage(root: Path, name: str, raw: bytes, zipped: bool = True) -> None:
    for old in (root / name, root / f"{name}.gz"):
        old.unlink(missing_ok=True)
    write(root / name, raw, zipped)


def images(n: int = TRAIN, rows: int = 28, cols: int = 28, extra: int = 0, magic: int = IMAGES_MAGIC) -> bytes:
    return idx_bytes(magic, (n, rows, cols), bytes(n * rows * cols + extra))


# (file damaged, its new contents, gzipped, what the one line says)
DAMAGED = [
    ("train-images-idx3-ubyte", images(magic=LABELS_MAGIC), True, "magic number 0x00000801, not 0x00000803"),
    ("train-images-idx3-ubyte", images(rows=32, cols=32), True, "images of 32x32, expected 28x28"),
    ("train-images-idx3-ubyte", images()[:-100], True, "truncated: its header declares 40 images"),
    ("train-images-idx3-ubyte", images()[:-100], False, "truncated: its header declares 40 images"),
    ("train-images-idx3-ubyte", images(extra=1), False, "holds more than the 40 images its header declares"),
    ("train-images-idx3-ubyte", images()[:10], False, "truncated in its header"),
    ("train-images-idx3-ubyte", b"\x00\x00", False, "2 bytes, too short for an IDX file of images"),
    ("train-images-idx3-ubyte", gzip.compress(images())[:-30], False, "cannot be read"),  # a gzip cut short
    ("train-images-idx3-ubyte", idx_bytes(IMAGES_MAGIC, (MAX_ITEMS + 1, 28, 28), b""), True,
     f"declares {MAX_ITEMS + 1:,} images; at most {MAX_ITEMS:,} are read"),
    ("t10k-labels-idx1-ubyte", idx_bytes(LABELS_MAGIC, (TEST,), bytes([3] * (TEST - 1) + [10])), True,
     "label 10 is outside 0..9"),
    ("t10k-labels-idx1-ubyte", idx_bytes(LABELS_MAGIC, (TEST - 1,), bytes(TEST - 1)), False,
     f"holds {TEST} images but"),
]


@pytest.mark.parametrize("name, raw, zipped, said", DAMAGED, ids=[f"{d[0]}: {d[3]}" for d in DAMAGED])
def test_a_damaged_file_is_one_line_naming_it_and_what_is_wrong(tmp_path, name, raw, zipped, said):
    root = write_set(tmp_path / "f")
    damage(root, name, raw, zipped)
    with pytest.raises(UsageError) as caught:
        load_dataset("fashion-mnist", str(root))
    line = str(caught.value)
    assert said in line and "\n" not in line and str(root) in line, line


def test_a_file_that_inflates_past_its_header_is_refused_after_that_many_bytes(tmp_path):
    """A decompression bomb: 2 images declared, 64 MB of zeros behind them in a 64 kB gzip."""
    root = write_set(tmp_path / "f")
    bomb = images(n=2, extra=64 << 20)
    damage(root, "train-images-idx3-ubyte", bomb)
    assert (root / "train-images-idx3-ubyte.gz").stat().st_size < 100_000
    with pytest.raises(UsageError, match="holds more than the 2 images its header declares"):
        load_dataset("fashion-mnist", str(root))


def test_missing_files_say_how_to_get_them(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match=r"data dir '.*' lacks train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                                         r"t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte \(the upstream IDX"):
        load_dataset("fashion-mnist", str(tmp_path))
    monkeypatch.setattr(datasets, "FASHION_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(UsageError, match=r"apt-get install dataset-fashion-mnist, or put the upstream files .* in "
                                         r"--data-dir DIR"):
        load_dataset("fashion-mnist")


def test_a_damaged_file_stops_a_command_with_one_line(tmp_path):
    root = write_set(tmp_path / "f")
    damage(root, "t10k-images-idx3-ubyte", images(n=TEST)[:-1])
    code, _, err = cli("simulate", "--algo", "allreduce", "--workers", "2", "--dataset", "fashion-mnist",
                       "--data-dir", str(root), "--steps", "1", "--out", str(tmp_path / "never.h5"))
    lines = [line for line in err.splitlines() if not line.startswith("hpcbench: warning:")]
    assert code == 2 and len(lines) == 1 and "t10k-images-idx3-ubyte.gz: truncated" in lines[0], err
    assert "Traceback" not in err and not (tmp_path / "never.h5").exists()


@requires_mpi
@pytest.mark.timeout(120)
def test_a_damaged_file_stops_every_rank_of_a_real_run_with_one_line(tmp_path):
    from hpcbench.launch.local import own_lines

    root = write_set(tmp_path / "f")
    damage(root, "train-labels-idx1-ubyte", idx_bytes(LABELS_MAGIC, (TRAIN,), bytes([11] * TRAIN)))
    out = tmp_path / "never.h5"
    proc = mpirun(3, "run", "--algo", "asgd", "--dataset", "fashion-mnist", "--data-dir", str(root), "--steps", "1",
                  "--batch-size", "4", "--out", str(out), timeout=90)
    lines = [line for line in own_lines(proc.stderr) if "warning" not in line]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "train-labels-idx1-ubyte.gz: label 11 is outside 0..9" in lines[0] and "Traceback" not in proc.stderr
    assert not any(out.parent.glob(out.name + "*"))


def test_the_small_cnn_runs_on_crafted_files(tmp_path):
    out = tmp_path / "sim.h5"
    code, _, err = cli("simulate", "--algo", "allreduce", "--workers", "2", "--model", "cnn-small", "--dataset",
                       "fashion-mnist", "--data-dir", str(write_set(tmp_path / "f")), "--steps", "2", "--batch-size",
                       "8", "--out", str(out))
    assert code == 0, err
    run = read_run(out)
    assert run.attrs["status"] == "ok" and 0.0 <= run.summary["final_accuracy"] <= 1.0


installed = pytest.mark.skipif(not Path(FASHION_DIR).is_dir(),
                               reason=f"{FASHION_DIR} is absent: apt-get install dataset-fashion-mnist")


@installed
@pytest.mark.slow  # 47 million pixels read and summed
def test_the_installed_data_set_is_fashion_mnist():
    d = load_dataset("fashion-mnist")
    assert d.x_train.shape == (60_000, 1, 28, 28) and d.x_test.shape == (10_000, 1, 28, 28)
    assert np.bincount(d.y_train).tolist() == [6000] * 10 and np.bincount(d.y_test).tolist() == [1000] * 10
    pixels = d.x_train.astype(np.float32) / d.scale
    assert float(pixels.mean()) == pytest.approx(d.mean[0], abs=5e-4)
    assert float(pixels.std()) == pytest.approx(d.std[0], abs=5e-4)
