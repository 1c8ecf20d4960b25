"""Shipped spec ops (docs/specs.md): TensorSpec modules written as a kernel library writes them,
with kernels beside them (a correct one and one with a single bug)."""
