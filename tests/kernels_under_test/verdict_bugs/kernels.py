"""The reference kernels with one deliberate fault (or one legitimate shortcut) each."""
from __future__ import annotations

from collections.abc import Callable

import torch

from harness.kernels.reference import decode_layers as _layers, fused_rope_decode_attention as _fused, \
    paged_decode_attention as _paged

STRAY_VALUE = 1000.0      # outside the canary's range and far from any context value


def stray_row_and_bad_out(**args):
    """Writes one cache row that no slot maps to, and gets every ``out`` element wrong by 1."""
    _fused(**args)
    rows = args["k_cache"].view(-1, *args["k_cache"].shape[-2:])
    stray = min(set(range(rows.shape[0])) - set(args["slot_mapping"].tolist()))
    rows[stray] = STRAY_VALUE
    args["out"].add_(1.0)


def _valid_rows_only(kernel: Callable, names: tuple[str, ...]) -> Callable:
    """``kernel``, but the rows of ``names`` whose slot is < 0 are never written (left as given)."""
    def launch(**args):
        scratch = {name: torch.empty_like(args[name]) for name in names}
        kernel(**{**args, **scratch})
        valid = args["slot_mapping"] >= 0
        for name in names:
            args[name][valid] = scratch[name][valid]

    return launch


# Correct: rows with slot < 0 are warmup/padding rows, which the contract does not compare.
fused_skips_padding_rows = _valid_rows_only(_fused, ("out",))
layers_skip_padding_rows = _valid_rows_only(_layers, ("logits", "next_hidden"))


def _paged_heads(unwritten: tuple[int, ...] = (), nan: tuple[int, ...] = (),
                 inf: tuple[int, ...] = ()) -> Callable:
    """paged_decode_attention that never stores heads ``unwritten`` and computes NaN / Inf in others."""
    def launch(**args):
        scratch = torch.empty_like(args["out"])
        _paged(**{**args, "out": scratch})
        scratch[:, list(nan)] = float("nan")
        scratch[:, list(inf)] = float("inf")
        stored = [h for h in range(scratch.shape[1]) if h not in unwritten]
        args["out"][:, stored] = scratch[:, stored]

    return launch


head_0_unwritten = _paged_heads(unwritten=(0,))
nan_in_head_1 = _paged_heads(nan=(1,))
inf_in_head_1 = _paged_heads(inf=(1,))
head_0_unwritten_nan_in_head_1 = _paged_heads(unwritten=(0,), nan=(1,))
