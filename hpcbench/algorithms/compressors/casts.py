"""16-bit all-reduces, as PyTorch DDP's ``fp16_compress_hook`` and ``bf16_compress_hook``: cast, divide by
the worker count, sum in the narrow type, cast back."""
from __future__ import annotations

import numpy as np

from hpcbench.algorithms.api import Sub
from hpcbench.algorithms.compressors.base import Compressor, Message, register
from hpcbench.algorithms.ops import Allreduce
from hpcbench.bfloat16 import from_bf16, to_bf16


@register
class Fp16(Compressor):
    name = "fp16"
    summary = "IEEE half precision: each worker's vector / n cast to float16 and summed in float16 (DDP's hook)"
    whole_vectors = True

    def reduce(self, vector: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        total = yield from self.summed(vector.astype(np.float16) / np.float16(len(members)), members)
        return None if total is None else total.astype(np.float32)

    def messages(self, workers: int) -> list[Message]:
        return [Message(Allreduce, 2 * self.model_size)]


@register
class Bf16(Compressor):
    name = "bf16"
    summary = "bfloat16: each worker's vector / n rounded to bfloat16 and summed in bfloat16 (DDP's hook)"
    whole_vectors = True

    def reduce(self, vector: np.ndarray, members: tuple[int, ...]) -> Sub[np.ndarray | None]:
        part = to_bf16(from_bf16(to_bf16(vector)) / np.float32(len(members)))
        total = yield from self.summed(part, members, bf16=True)
        return None if total is None else from_bf16(total)

    def messages(self, workers: int) -> list[Message]:
        return [Message(Allreduce, 2 * self.model_size, bf16=True)]
