"""Intermediates: the named tensors a fused kernel may dump on the way to its outputs.

``spec``    which names each op has, their shapes, their dataflow order and what each consumes
            (torch-free: the front end and the case files use it without torch);
``compare`` one dumped intermediate against its golden: ``ratio_allclose``, the precision
            metrics (cosine, max abs/rel, share of elements off by more than 1/1000 and
            5/1000), bit-exactness; then the verdicts (ok, bit-exact, bad, inherited, missing)
            and the first bad intermediate in dataflow order;
``files``   the ``HARNESS_DUMP_DIR`` formats (``.pt``, ``.npy``, ``.bin`` + ``.json``).

The worker side (``harness.worker.dumps``) collects a launch's dumps through these; the
offline command (``harness dumps``) reads a directory of dumps made elsewhere through the
same ones.  docs/intermediates.md is the user's description.
"""
