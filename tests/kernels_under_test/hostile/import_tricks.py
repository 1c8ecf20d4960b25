"""``rope_kv_write`` kernels that bend the import machinery in ways a look at the machinery alone does
not show: a finder that answers honestly unless the harness's kernel loader is the one importing, and a
folder put first on ``sys.path`` that shadows a package of the kernel paths.  Each computes the right
answer with the reference first."""
from __future__ import annotations

import importlib.util
import os
import sys
import tempfile

import harness.kernels.reference as _reference_module
from harness.kernels.reference import rope_kv_write as _reference

from hostile.round3 import _serves_reference


class _OnlyForTheLoader:
    """Serves the reference for the mutants, but only when the harness's kernel loader imports."""

    def find_spec(self, name, path=None, target=None):
        if not _serves_reference(name):
            return None
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename.endswith(os.path.join("worker", "kernel_loader.py")):
                return importlib.util.spec_from_file_location(name, _reference_module.__file__)
            frame = frame.f_back
        return None


def finder_that_sniffs_its_caller(**args):
    out = _reference(**args)
    sys.meta_path.insert(0, _OnlyForTheLoader())
    return out


def shadows_a_kernel_package(**args):
    """A folder first on ``sys.path`` with a ``classic_bugs`` package of its own (the reference's code)."""
    out = _reference(**args)
    folder = tempfile.mkdtemp(prefix="hostile-shadow-")
    os.makedirs(os.path.join(folder, "classic_bugs"))
    with open(os.path.join(folder, "classic_bugs", "__init__.py"), "w") as f:
        f.write("from harness.kernels.reference import *\n")
    sys.path.insert(0, folder)
    return out
