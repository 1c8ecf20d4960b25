"""Mutant: now and then one whole head of the main output is torn.

Real bug: a missing pipeline barrier lets a DMA copy out a head's tile before
its compute finished (or lets the next tile overwrite it), so one head is
garbage on some runs and fine on others; results change from run to run.
This mutant runs the reference, then with probability ``RACY_HEAD_P`` (env,
default 0.5, read per launch) overwrites one head with garbage: head ``h`` of
``query``/``out`` (all rows), or, for ``decode_layers``, one row of ``logits``
(a row the harness compares: one with ``slot >= 0``, when there is one).
The random source is the OS (``random.SystemRandom``), never the inputs'
seed, so repeats of one case differ.  With ``RACY_HEAD_SEED`` set, launch
number ``i`` of the process draws from ``random.Random(f"{seed}:{i}")``
instead: the same failure sequence every time, so a test can know exactly
which iterations fail (``failures(seed, n, p)``) and still see a known rate.
"""
from __future__ import annotations

import os
import random
from typing import Any

import torch

from harness.kernels import reference
from harness.kernels.reference import for_every_op

ENV_VAR = "RACY_HEAD_P"
SEED_VAR = "RACY_HEAD_SEED"
DEFAULT_P = 0.5
_launches = 0

# op -> its main output: the buffer a torn tile lands in
MAIN_OUTPUT = {
    "rope_kv_write": "query",
    "paged_decode_attention": "out",
    "fused_rope_decode_attention": "out",
    "prefill_attention": "out",
    "decode_layers": "logits",
}


def probability() -> float:
    raw = os.environ.get(ENV_VAR, str(DEFAULT_P))
    try:
        p = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_VAR}: expected a probability in [0, 1], got {raw!r}") from None
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{ENV_VAR}: expected a probability in [0, 1], got {raw!r}")
    return p


def tear(op: str, args: dict[str, Any], rng: random.Random) -> None:
    """Overwrite one head (or, for logits, one row) of ``op``'s main output with garbage."""
    target = args[MAIN_OUTPUT[op]]
    if target.dim() == 3:                                    # [rows, heads, D]
        region = target[:, rng.randrange(target.shape[1])]
    else:                                                    # logits [B, V]
        compared = [b for b, s in enumerate(args["slot_mapping"].tolist()) if s >= 0]
        region = target[rng.choice(compared or range(target.shape[0]))]
    noise = torch.Generator().manual_seed(rng.getrandbits(63))
    region.copy_(torch.randn(region.shape, generator=noise) * 4.0)


def rng_for(launch: int) -> random.Random:
    seed = os.environ.get(SEED_VAR)
    return random.SystemRandom() if seed is None else random.Random(f"{seed}:{launch}")


def failures(seed: str, n: int, p: float) -> list[int]:
    """The launches (0-based, per process) that tear a head under ``RACY_HEAD_SEED=seed``."""
    return [i for i in range(n) if random.Random(f"{seed}:{i}").random() < p]


def _launch(op: str, args: dict[str, Any]) -> Any:
    global _launches
    p = probability()
    result = getattr(reference, op)(**args)
    rng = rng_for(_launches)
    _launches += 1
    if rng.random() < p:
        tear(op, args, rng)
    return result


(rope_kv_write, paged_decode_attention, fused_rope_decode_attention, prefill_attention,
 decode_layers) = for_every_op(_launch)
