"""Fixed byte layouts for window contents and messages: named, typed fields at 8-byte-aligned offsets."""
from __future__ import annotations

import struct
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
        # Precomputed, because frames sit on every message's path (the simulator's hot loop).
        self._slices = {f.name: (f.offset, f.offset + f.nbytes, f.dtype) for f in self.fields.values()}
        self._scalars = {f.name: (struct.Struct("<" + f.dtype.char), f.offset)
                         for f in self.fields.values() if f.count == 1}
        self._integers = {n: v for n, v in self._scalars.items()
                          if self.fields[n].dtype.kind in "iu"}
        self._reals = {n: v for n, v in self._scalars.items() if self.fields[n].dtype.kind == "f"}
        # The bytes between fields (alignment): zeroed by ``pack``, which writes every field itself.
        ends = [f.offset + f.nbytes for f in self.fields.values()]
        starts = [f.offset for f in self.fields.values()][1:] + [self.nbytes]
        self._gaps = [(end, start) for end, start in zip(ends, starts) if start > end]

    def new(self) -> np.ndarray:
        return np.zeros(self.nbytes, dtype=np.uint8)

    def view(self, buf: np.ndarray, name: str) -> np.ndarray:
        start, stop, dtype = self._slices[name]
        return buf[start:stop].view(dtype)

    def offset(self, name: str) -> int:
        return self.fields[name].offset

    def empty(self) -> np.ndarray:
        """A new buffer whose every field its caller writes: only the bytes between fields are zeroed."""
        buf = np.empty(self.nbytes, dtype=np.uint8)
        for start, stop in self._gaps:
            buf[start:stop] = 0
        return buf

    def pack(self, **values: object) -> np.ndarray:
        """A new buffer holding ``values``; fields not given are zero."""
        if len(values) < len(self.fields):
            return self.fill(np.zeros(self.nbytes, dtype=np.uint8), **values)
        return self.fill(self.empty(), **values)

    def fill(self, buf: np.ndarray, **values: object) -> np.ndarray:
        """``buf`` (this frame's bytes) with ``values`` written over its fields; → ``buf``. A buffer
        reused step after step spares a large frame's allocation and first-touch page faults."""
        scalars = self._scalars
        for name, value in values.items():
            if type(value) is not np.ndarray and name in scalars:
                fmt, offset = scalars[name]
                fmt.pack_into(buf, offset, value)  # type: ignore[arg-type]  # (numpy's stubs: not a Buffer)
            else:
                start, stop, dtype = self._slices[name]
                buf[start:stop].view(dtype)[...] = value
        return buf

    def integer(self, buf: np.ndarray, name: str) -> int:
        """The value of a one-element integer field."""
        fmt, offset = self._integers[name]
        return fmt.unpack_from(buf, offset)[0]  # type: ignore[arg-type]

    def real(self, buf: np.ndarray, name: str) -> float:
        """The value of a one-element floating-point field."""
        fmt, offset = self._reals[name]
        return fmt.unpack_from(buf, offset)[0]  # type: ignore[arg-type]
