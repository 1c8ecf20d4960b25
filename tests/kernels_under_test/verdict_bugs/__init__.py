"""Kernels that each put one verdict decision to the test (``verdict_bugs.kernels:<name>``).

Test-only, loaded by import path like an external kernel library; used by
tests/unit/test_verdicts.py.
"""
