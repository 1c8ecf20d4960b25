"""rowquant: per-row int8 quantisation as an op pack (torch-free: the harness reads it without torch)."""
from harness.case import Tolerance
from harness.intermediates.spec import Intermediate
from harness.ops import Arg, OpSpec
from harness.packs.api import OpEntry, Pack

CONTRACT = OpSpec(
    "quantize_rows",
    (
        Arg("x", "input", ("B", "H"), "bfloat16"),
        Arg("codes", "output", ("B", "H"), "int8", ("batch", None)),
        Arg("scales", "output", ("B", "1"), "float32", ("batch", None)),
    ),
    writes_cache=False,
)

PACK = Pack(
    name="rowquant",
    ops={
        "quantize_rows": OpEntry(
            CONTRACT,
            {"x": "row, feature", "codes": "row, feature: round(x / scale), in [-127, 127]",
             "scales": "row: max |x| / 127"},
            golden="rowquant.golden",
            tolerances={"scales": Tolerance(atol=0.0, rtol=1e-6, max_error_ratio=0.0),
                        "codes": Tolerance(atol=0.0, rtol=0.0, max_error_ratio=0.0)},
            compare={"codes": "dequant(scales)"},
            intermediates=lambda layers: (Intermediate("absmax", ("rows", "1"), (), tolerance="scales"),),
        ),
    },
    kernels={
        "rowquant-ref": {"quantize_rows": "rowquant.kernels:quantize_rows"},
        "rowquant-per-tensor": {"quantize_rows": "rowquant.kernels:per_tensor_scale"},
        "rowquant-half": {"quantize_rows": "rowquant.kernels:half_the_rows"},
    },
    inputs="rowquant.inputs",
)
