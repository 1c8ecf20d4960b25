"""Kernels written to libraries' public APIs (torch SDPA, flex_attention, transformers' Qwen3),
each bound to the op contracts with ``harness.adapters``: examples of plugging a kernel in
(docs/adapters.md), registered as ``torch-sdpa``, ``torch-flex``, ``transformers-qwen3``."""
