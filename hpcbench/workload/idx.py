"""IDX files, the format of MNIST and Fashion-MNIST, read as outside input: gzipped or not (told by the
file's first bytes, not its name), each checked against its header before its bytes are trusted, and
never decompressed past what the header declares (a small file that inflates without end is refused
after that many bytes). Anything wrong is one line naming the file and what is wrong."""
from __future__ import annotations

import gzip
import io
import math
import struct
import zlib
from pathlib import Path

import numpy as np

from hpcbench.errors import UsageError

IMAGES_MAGIC = 0x00000803  # unsigned bytes, three dimensions: count, rows, columns
LABELS_MAGIC = 0x00000801  # unsigned bytes, one dimension: count
GZIP_MAGIC = b"\x1f\x8b"
MAX_ITEMS = 250_000  # the most images or labels one file may declare (Fashion-MNIST's largest holds 60,000)


def body(path: Path, stream: io.BufferedIOBase, magic: int, item: tuple[int, ...], what: str) -> np.ndarray:
    """The items after the header of an open IDX stream, as a count × ``item`` uint8 array."""
    ndim = 1 + len(item)
    head = stream.read(4 + 4 * ndim)
    if len(head) < 4:
        raise UsageError(f"{path}: {len(head)} bytes, too short for an IDX file of {what}")
    (found,) = struct.unpack(">I", head[:4])
    if found != magic:
        raise UsageError(f"{path}: magic number 0x{found:08x}, not 0x{magic:08x} (an IDX file of {what})")
    if len(head) < 4 + 4 * ndim:
        raise UsageError(f"{path}: truncated in its header")
    count, *shape = struct.unpack(f">{ndim}I", head[4:])
    if tuple(shape) != item:
        raise UsageError(f"{path}: {what} of {'x'.join(map(str, shape))}, expected {'x'.join(map(str, item))}")
    if count > MAX_ITEMS:
        raise UsageError(f"{path}: declares {count:,} {what}; at most {MAX_ITEMS:,} are read")
    size = count * math.prod(item)
    data = stream.read(size + 1)  # one byte more than declared tells a longer file, and no more is inflated
    if len(data) < size:
        raise UsageError(f"{path}: truncated: its header declares {count:,} {what} ({size:,} bytes), it holds "
                         f"{len(data):,} bytes of them")
    if len(data) > size:
        raise UsageError(f"{path}: holds more than the {count:,} {what} its header declares")
    return np.frombuffer(data, np.uint8).reshape(count, *item)


def read_idx(path: Path, magic: int, item: tuple[int, ...], what: str) -> np.ndarray:
    """An IDX file of unsigned bytes, gzipped or not, checked: its magic number, its item shape, and a
    length that is exactly what its header declares."""
    try:
        with open(path, "rb") as raw:
            zipped = raw.read(2) == GZIP_MAGIC
            raw.seek(0)
            if not zipped:
                return body(path, raw, magic, item, what)
            with gzip.GzipFile(fileobj=raw) as stream:
                return body(path, stream, magic, item, what)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise UsageError(f"{path}: cannot be read: {exc}") from None


def read_images(path: Path, rows: int, cols: int) -> np.ndarray:
    """An IDX file of ``rows`` × ``cols`` images → N×1×rows×cols uint8."""
    images = read_idx(path, IMAGES_MAGIC, (rows, cols), "images")
    return images.reshape(-1, 1, rows, cols)


def read_labels(path: Path, classes: int) -> np.ndarray:
    """An IDX file of labels → N int64, each in 0..classes-1."""
    labels = read_idx(path, LABELS_MAGIC, (), "labels").astype(np.int64)
    bad = labels[labels >= classes]
    if bad.size:
        raise UsageError(f"{path}: label {int(bad[0])} is outside 0..{classes - 1}")
    return labels
