"""Imports a library that puts a path hook first and appends its own ``sys.path`` entry."""
import import_hooks.hook_lib
import hook_lib_bundled
from harness.kernels.reference import rope_kv_write as _reference


def rope_kv_write(**args):
    assert hook_lib_bundled.SCALE == 1.0
    return _reference(**args)
