"""Mutant: K/V cache rows written for every slot, including the ``slot_mapping = -1`` sentinel.

Real bug: a fused kernel computed the cache row address as
``base + slot * Hkv * D`` without checking ``slot < 0`` (the "do not write"
sentinel of serving warmup and padding rows).  With ``slot = -1`` the write
lands one row before the buffer; on Ascend the device faults (AICore
exception, 507018), on a CPU it silently corrupts whatever lies there.  This
mutant does the same raw pointer arithmetic with ``torch.as_strided`` on the
cache's storage, so the write lands in the harness's guard band before the
buffer.  Everything else is the reference.
"""
from __future__ import annotations

import torch
from torch import Tensor

from harness.kernels.reference import ReferenceKernel


class UnguardedSlotWrite(ReferenceKernel):
    def write(self, cache: Tensor, slots: Tensor, rows: Tensor) -> None:
        Hkv, D = cache.shape[-2:]
        rows = rows.to(cache.dtype)
        base = cache.storage_offset()          # layer l's base for a [L, ...] cache sliced to [l]
        for r, slot in enumerate(slots.tolist()):
            row = torch.as_strided(cache, size=(Hkv, D), stride=(D, 1),
                                   storage_offset=base + slot * Hkv * D)
            row.copy_(rows[r])


_KERNEL = UnguardedSlotWrite()
rope_kv_write = _KERNEL.rope_kv_write
fused_rope_decode_attention = _KERNEL.fused_rope_decode_attention
prefill_attention = _KERNEL.prefill_attention
decode_layers = _KERNEL.decode_layers
