"""On-device correctness and regression harness for fused LLM kernels."""

__version__ = "0.1.0"
