"""bfloat16 without a bfloat16 type: numpy has none, so its values travel as their 16-bit patterns
(uint16, the top half of a float32), and a bf16 all-reduce sums them with ``add_bf16``."""
from __future__ import annotations

import numpy as np


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns (uint16), rounded to nearest even as torch does; NaN stays NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + (np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1)))) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def from_bf16(u: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) → float32, exactly."""
    return (u.astype(np.uint32) << 16).view(np.float32)


def add_bf16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise bfloat16 sum of two bit-pattern vectors (the reduction a bf16 all-reduce does)."""
    return to_bf16(from_bf16(a) + from_bf16(b))


def summed(parts: list[np.ndarray], bf16: bool = False) -> np.ndarray:
    """The element-wise sum of every worker's vector, added in the order given, in the vectors' own
    type (``bf16``: bit patterns summed as bfloat16): what an all-reduce hands back."""
    total = parts[0].copy()
    for other in parts[1:]:
        if bf16:
            total = add_bf16(total, other)
        else:
            total += other
    return total
