"""Bind a kernel written to another calling convention to an op's signature (docs/adapters.md).

The public name of the adapter pieces, which are the Qwen3 pack's (``harness/packs/qwen3/adapters.py``):
what they translate (cache layouts, page tables, per-layer lists) is that pack's contract.  Kernels
import them from here.  Imports torch: worker side only.
"""
from harness.packs.qwen3.adapters import *  # noqa: F401,F403

__all__ = ["AdapterCall", "Adapted", "CacheLayout", "Const", "Drop", "ExpandLayers", "Layout", "PageFormat",
           "Paging", "PerLayer", "Piece", "Rename", "Returns", "adapt", "block_table_from_flashinfer",
           "cache_layout", "const", "drop", "expand_layers", "fia_pages", "flashinfer_from_block_table",
           "flashinfer_pages", "per_layer", "rename", "returns"]
