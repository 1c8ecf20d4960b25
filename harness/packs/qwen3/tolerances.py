"""The Qwen3 ops' default tolerances and what each precision preset admits (docs/contracts.md,
"Tolerances" and "Precision presets"); every other output takes ``harness.case.DEFAULT_TOLERANCE``."""
from __future__ import annotations

from dataclasses import replace

from harness.case import DEFAULT_LOGITS_TOLERANCE, DEFAULT_TOLERANCE, Tolerance

# decode_layers runs L layers of bf16 weights and bf16 activations into every matmul
# (fp32 accumulation), against an fp32 golden: the residual stream grows with depth and
# so does its rounding. Measured (tiny, 4 layers, 16 rows): the reference kernel differs by
# up to 0.09 on next_hidden (RMS 5) and 0.03 on logits (RMS 1); a kernel that also keeps
# the residual in bf16 by up to 0.16 on next_hidden (1.4% of elements beyond atol 0.05 +
# rtol 0.03). Bugs move them by O(1); logits take the generic DEFAULT_LOGITS_TOLERANCE.
# Attention's output is a weighted mean of value rows: its magnitude falls as the weight spreads
# (RMS about 1 over one key, 0.02 over 2048 keys of near-uniform weight), and a fixed atol of
# 3e-3 would be a tenth of the signal at long context.  Its atol follows each head's RMS instead
# (docs/contracts.md, "The bound follows the signal").  Measured with the 12 correct kernels of
# bench/bench_attention.py over the long and shipped bf16 cases at every attention value: the
# largest fraction any needed was 0.0041 (softmax probabilities rounded to bf16 before P.V, as
# FlashAttention does; every fp32 kernel needed none beyond the rounding terms); 0.02 leaves 5x.
ATTENTION_ATOL_RMS = 0.02
ATTENTION_OUT_TOLERANCE = replace(DEFAULT_TOLERANCE, atol_rms=ATTENTION_ATOL_RMS)
_ATTENDING = ("paged_decode_attention", "fused_rope_decode_attention", "prefill_attention")
# op -> output or cache -> its default
TOLERANCES: dict[str, dict[str, Tolerance]] = {
    **{op: {"out": ATTENTION_OUT_TOLERANCE} for op in _ATTENDING},
    "decode_layers": {
        "logits": DEFAULT_LOGITS_TOLERANCE,
        "next_hidden": Tolerance(atol=1e-1, rtol=3e-2, max_error_ratio=0.02),
        "k_cache": Tolerance(atol=2e-2, rtol=2e-2, max_error_ratio=0.01),
        "v_cache": Tolerance(atol=2e-2, rtol=2e-2, max_error_ratio=0.01),
    },
}


# Precision presets (docs/contracts.md, "Precision presets"): how many roundings a kernel may do
# before it stores an output, as the tolerances that admit them.  ``fp32-compute`` (the default)
# is the contract's prologue: QK-norm and RoPE in fp32, each output and cache row rounded once to
# the stored dtype.  ``bf16-compute`` admits a prologue computed in bf16 as a bf16 transformers
# model does it (the scaled projection, the normalised row, its product with the weight, each
# RoPE product and their sum rounded: about six roundings of 2^-8 relative, of terms O(1) whose
# sum can be smaller).  Measured with tests/outside_kernels/outside/bf16_prologue.py on the ci
# matrices, seeds 0-1: with atol 0.01 the 99.5% element needs rtol 0.0018 on query and k rows,
# with atol 0.02 none; the preset takes atol 0.02, rtol 0.01.  paged_decode_attention has no
# prologue and decode_layers' defaults already admit bf16 activations: both keep theirs.
# Its attention output follows the signal too, with a wider fraction: the prologue's roundings
# move the scores, and the same kernel needed up to 0.028 of a head's RMS (sharp attention;
# 0.0098 uniform) over the long and shipped cases; 0.1 leaves 3.5x.
BF16_COMPUTE_TOLERANCE = Tolerance(atol=2e-2, rtol=1e-2, max_error_ratio=0.005)
BF16_COMPUTE_ATOL_RMS = 0.1
_BF16_PROLOGUE = {"rope_kv_write": ("query", "k_cache", "v_cache"),
                  "fused_rope_decode_attention": ("out", "query", "k_cache", "v_cache"),
                  "prefill_attention": ("out", "k_cache", "v_cache")}
# op -> precision preset -> output or cache -> the tolerance it admits
PRECISION_TOLERANCES: dict[str, dict[str, dict[str, Tolerance]]] = {
    op: {"bf16-compute": {name: replace(BF16_COMPUTE_TOLERANCE,
                                        atol_rms=BF16_COMPUTE_ATOL_RMS if name == "out" else None)
                          for name in names}}
    for op, names in _BF16_PROLOGUE.items()
}
