"""The user's own mutant control (``hostile.user_mutant:rope_kv_write``): RoPE at the wrong
positions, so every case of it is a MISMATCH."""
from __future__ import annotations

from harness.kernels.reference import rope_kv_write as _reference


def rope_kv_write(**args):
    return _reference(**{**args, "positions": args["positions"] + 1})
