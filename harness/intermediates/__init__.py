"""Intermediates: the named tensors a fused kernel may dump on the way to its outputs.

``spec``    which names each op has, their shapes, their dataflow order and what each consumes
            (torch-free: the front end and the case files use it without torch);
``files``   the ``HARNESS_DUMP_DIR`` formats (``.pt``, ``.npy``, ``.bin`` + ``.json``);
``table``   the table of intermediates the reports print (torch-free).

This package is below the goldens and the worker, and imports neither.  The comparison of a
dump with its golden and the verdicts are the worker's (``harness.worker.dumps_compare``):
``harness.worker.dumps`` collects a launch's dumps, and ``harness dumps`` reads a directory of
dumps made elsewhere (``harness.worker.dumps_offline``), through the same ones.
docs/intermediates.md is the user's description.
"""
