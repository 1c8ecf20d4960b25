"""The sampling pack: what a decoder does with its last hidden state before it samples
(docs/sampling.md).  One op, ``lm_head_topk``: the final RMSNorm, the LM head and the top-k
candidates, with an integer output.  The second pack built on the op pack API (docs/architecture.md,
"Op packs"), and a different shape of op from the Qwen3 pack's: no cache, no sequences, an int32
output whose elements may legitimately swap (ties), judged by a comparator the pack declares.

Torch-free: the front end reads it without torch; its worker-side parts are named by import path.
Its golden is ``harness.goldens.lm_head_topk`` (goldens/lm_head_topk.py), its kernels
``harness.kernels.sampling`` (kernels/sampling.py), its inputs ``harness.packs.sampling.inputs``.
"""
from __future__ import annotations

from harness.case import Tolerance
from harness.intermediates.spec import Intermediate
from harness.ops import Arg, OpSpec
from harness.packs.api import OpEntry, Pack

# The candidates kept per row: a literal shape symbol, so no case-file key and no geometry field.
K = 8

CONTRACT = OpSpec(
    "lm_head_topk",
    (
        Arg("hidden", "input", ("B", "H"), "bfloat16"),
        Arg("final_norm_weight", "input", ("H",), "float32"),
        Arg("lm_head", "input", ("V", "H"), "bfloat16"),
        Arg("eps", "scalar", (), "float"),
        Arg("topk_values", "output", ("B", str(K)), "float32", ("batch", None)),
        Arg("topk_indices", "output", ("B", str(K)), "int32", ("batch", None)),
    ),
    writes_cache=False,
)

LAYOUTS = {
    "hidden": "batch, hidden: the last hidden state of each row, before the final norm",
    "final_norm_weight": "hidden",
    "lm_head": "vocab, hidden: one row per token (logits = normed · lm_headᵀ)",
    "eps": "the final RMSNorm's epsilon",
    "topk_values": f"batch, rank: the {K} largest logits of each row, in descending order",
    "topk_indices": "batch, rank: the token of each value (ties in any order)",
}

# Measured (docs/sampling.md, "Tolerances and why"): beyond the rounding spread of the normed state
# (the golden's ``@exact`` twin), a correct fp32-compute kernel is off the golden by at most 1.5e-4
# (2.3e-5 relative; an fp64 golden rounding a normed element the other way) on top values of 6-12,
# so the bound (about 1e-3 there) leaves a margin of 5; a kernel that stores its logits in bf16 is
# off by up to half a bf16 ulp (2^-9 relative, 3.1e-2), which this preset refuses and
# ``bf16-compute`` admits.
VALUES = Tolerance(atol=1e-4, rtol=1e-4, max_error_ratio=0.0)
VALUES_BF16 = Tolerance(atol=1e-3, rtol=2 ** -8, max_error_ratio=0.0)
# The indices' tolerance is the tie window ``topk_pairs`` reads: a kernel may pick a token the golden
# did not when its value is within this of the golden's k-th value.  Two logits that close are a tie
# for a correct kernel: the two readings of the normed state (rounded to bf16 or not) move the
# sorted values by up to 0.022 (measured); under bf16-compute, bf16 logits tie within one ulp.
TIE_WINDOW = Tolerance(atol=2e-2, rtol=2 ** -8, max_error_ratio=0.0)
TIE_WINDOW_BF16 = Tolerance(atol=2e-2, rtol=2 ** -7, max_error_ratio=0.0)


def _intermediates(num_layers: int) -> tuple[Intermediate, ...]:
    return (Intermediate("normed", ("rows", "H"), (), tolerance="topk_values"),
            Intermediate("logits", ("rows", "V"), ("normed",), tolerance="topk_values"))


_K = "harness.kernels.sampling"
KERNELS = {
    "reference": {"lm_head_topk": f"{_K}:lm_head_topk"},
    # correct kernels the comparison must not flag
    "topk_fp32_normed": {"lm_head_topk": f"{_K}:topk_fp32_normed"},       # the other reading of the norm
    "topk_ascending_ties": {"lm_head_topk": f"{_K}:topk_ascending_ties"},  # ties in the other order
    # mutants: each a bug the checks must catch (docs/sampling.md, "Mutants")
    "topk_no_norm": {"lm_head_topk": f"{_K}:topk_no_norm"},
    "topk_off_by_one": {"lm_head_topk": f"{_K}:topk_off_by_one"},
    "topk_bf16_logits": {"lm_head_topk": f"{_K}:topk_bf16_logits"},
    "topk_borrowed_value": {"lm_head_topk": f"{_K}:topk_borrowed_value"},  # fools topk_pairs, not the check
}

PACK = Pack(
    name="sampling",
    ops={
        "lm_head_topk": OpEntry(
            CONTRACT, LAYOUTS, "harness.goldens.lm_head_topk",
            tolerances={"topk_values": VALUES, "topk_indices": TIE_WINDOW},
            precision_tolerances={"bf16-compute": {"topk_values": VALUES_BF16, "topk_indices": TIE_WINDOW_BF16}},
            intermediates=_intermediates,
            compare={"topk_indices": "topk_pairs(topk_values)"},
            checks=("harness.packs.sampling.checks:token_logits",),
        ),
    },
    kernels=KERNELS,
    inputs="harness.packs.sampling.inputs",
)
