"""Imports a library that puts its own finder first on ``sys.meta_path``."""
import import_hooks.own_finder_lib
import import_hooks.own_finder_lib.tables.rope as _tables
from harness.kernels.reference import rope_kv_write as _reference


def rope_kv_write(**args):
    assert _tables.SCALE == 1.0
    return _reference(**args)
