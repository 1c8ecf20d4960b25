"""Independent kernels for the harness's op contracts (see ../README.md)."""
