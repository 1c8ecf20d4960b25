"""Kernels that write into their read-only inputs, loaded by import path (``input_writers.kernels:<name>``).

Test-only: each computes the right answer and leaves a caller's input changed, the bug
the input check exists for (in a serving engine it destroys the caller's activations).
"""
