"""Kernels under test that ship with the harness: ``reference``, ``triton`` and the mutants.

Installed as ``harness.kernels``; the names they go by are in ``harness.registry``.
"""
