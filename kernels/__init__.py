"""Kernels under test that ship with the harness: ``reference``, ``triton`` and the mutants.

Installed as ``harness.kernels``; the names they go by are in ``harness.ops.registry``.
"""

if __name__ != "harness.kernels":     # a bare `kernels` found because the checkout's root is on sys.path: not ours
    from harness.bare_names import give_way
    give_way(__name__, __file__)
