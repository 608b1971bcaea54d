"""Fixed byte layouts for window contents and messages: named, typed fields at 8-byte-aligned offsets."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Field:
    name: str
    dtype: np.dtype
    count: int
    offset: int

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * self.count


class Frame:
    """A layout such as ``Frame(version=(np.int64, 1), params=(np.float32, d))``.

    ``new()`` makes a zeroed byte buffer; ``view(buf, name)`` is a typed, writable view into it.
    """

    def __init__(self, **fields: tuple[type, int]) -> None:
        self.fields: dict[str, Field] = {}
        offset = 0
        for name, (dtype, count) in fields.items():
            dt = np.dtype(dtype)
            self.fields[name] = Field(name, dt, count, offset)
            offset += -(-dt.itemsize * count // 8) * 8
        self.nbytes = offset

    def new(self) -> np.ndarray:
        return np.zeros(self.nbytes, dtype=np.uint8)

    def view(self, buf: np.ndarray, name: str) -> np.ndarray:
        f = self.fields[name]
        return buf[f.offset:f.offset + f.nbytes].view(f.dtype)

    def offset(self, name: str) -> int:
        return self.fields[name].offset

    def pack(self, **values: object) -> np.ndarray:
        buf = self.new()
        for name, value in values.items():
            self.view(buf, name)[...] = value
        return buf

    def scalar(self, buf: np.ndarray, name: str) -> float | int:
        return self.view(buf, name)[0].item()
