"""Kernels with classic bugs, loaded by import path (``classic_bugs.kernels:<name>``) through --kernel-path.

Test-only: they check that the harness's checks catch bugs the shipped mutants
do not cover, the way an external kernel library would be tested.
"""
