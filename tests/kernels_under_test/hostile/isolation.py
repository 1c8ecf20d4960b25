"""``rope_kv_write`` kernels for ``--isolation case`` (issue 37, item 1): each computes the right answer,
then leaves a change behind in its process.  ``patches_the_loader`` changes what no hygiene check
watches (the worker's own kernel loader, which then serves the reference for every kernel): only a
fresh process per case keeps it from the next case."""
from __future__ import annotations

import math
import resource
import sys

from harness.kernels.reference import rope_kv_write as _reference


def patches_isfinite(**args):
    out = _reference(**args)
    math.isfinite = lambda x: True
    return out


def patches_the_loader(**args):
    out = _reference(**args)
    loader = sys.modules["harness.worker.execute"].KernelLoader
    loader.load = lambda self, kernel, op: _reference
    return out


def lowers_hard_nofile(**args):
    out = _reference(**args)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 32), min(hard, 32)))
    return out
