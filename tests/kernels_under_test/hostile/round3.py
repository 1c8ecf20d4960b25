"""``rope_kv_write`` kernels that change the worker's import machinery, standard library, limits,
descriptors and scheduling, as careless (or clever) libraries do (issue 37).  Each computes the
right answer with the reference first, then leaves its change for the cases after it."""
from __future__ import annotations

import importlib.util
import math
import os
import resource
import sys
import types

import torch

import harness.kernels.reference as _reference_module
from harness.kernels.reference import rope_kv_write as _reference

USER_MUTANT = "hostile.user_mutant"      # the user's own mutant control in these tests


def _serves_reference(name: str) -> bool:
    return name.startswith("harness.kernels.mutants.") or name == USER_MUTANT


class _CachedKernels:
    """A "compiled kernel cache" finder that answers every mutant module with the reference's code."""

    def find_spec(self, name, path=None, target=None):
        if _serves_reference(name):
            return importlib.util.spec_from_file_location(name, _reference_module.__file__)
        return None


def meta_path_serves_reference(**args):
    out = _reference(**args)
    sys.meta_path.insert(0, _CachedKernels())
    return out


def _fake(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.rope_kv_write = _reference
    return module


def preloads_mutant_modules(**args):
    """Registers modules before their first import (no existing entry is replaced)."""
    out = _reference(**args)
    for name in ("harness.kernels.mutants.skip_rope", USER_MUTANT):
        sys.modules[name] = _fake(name)
    return out


def _mutant_folders():
    import harness.kernels as pkg
    return {os.path.join(list(pkg.__path__)[0], "mutants"), os.path.dirname(os.path.abspath(__file__))}


class _Hook:
    """A path hook that answers the mutants' folders with the reference's finder (declines the rest)."""

    def __call__(self, path):
        if path in _mutant_folders():
            return _CachedKernels()
        raise ImportError(path)


def path_hook_first(**args):
    """Puts its hook first and drops the mutants' folders from the importer cache, so it is asked."""
    out = _reference(**args)
    sys.path_hooks.insert(0, _Hook())
    for folder in _mutant_folders():
        sys.path_importer_cache.pop(folder, None)
    return out


def importer_cache_poisoned(**args):
    """Answers the mutants' folder with the reference's finder."""
    out = _reference(**args)
    import harness.kernels as pkg
    folder = os.path.join(list(pkg.__path__)[0], "mutants")
    sys.path_importer_cache[folder] = _CachedKernels()
    return out


def rebinds_isnan(**args):
    out = _reference(**args)
    math.isnan = lambda x: False
    math.isfinite = lambda x: True
    return out


def _lower(which: int, soft: int) -> None:
    _, hard = resource.getrlimit(which)
    resource.setrlimit(which, (soft, hard))


def no_file_size(**args):
    out = _reference(**args)
    _lower(resource.RLIMIT_FSIZE, 0)
    return out


def ten_descriptors(**args):
    out = _reference(**args)
    _lower(resource.RLIMIT_NOFILE, 10)
    return out


def lowers_hard_nofile(**args):
    """A lowered hard limit cannot be raised again by the worker."""
    out = _reference(**args)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 64), 64))
    return out


_opened = []


def leaks_descriptors(**args):
    """Opens its config file on every call and keeps it, until the limit."""
    out = _reference(**args)
    try:
        while True:
            _opened.append(open(os.devnull))
    except OSError:
        pass
    return out


def pins_and_renices(**args):
    out = _reference(**args)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    os.nice(19)
    return out


def leaves_shm_file(**args):
    out = _reference(**args)
    where = os.environ.get("HOSTILE_SHM", "/dev/shm/hostile-kernel-scratch")
    with open(where, "wb") as f:
        f.write(b"\0" * 4096)
    return out


def new_tf32_api(**args):
    out = _reference(**args)
    torch.backends.fp32_precision = "tf32"
    return out


class _PatchesOnCollect:
    def __init__(self):
        self.me = self            # a reference cycle: only the collector frees it

    def __del__(self):
        original = torch.rsqrt
        torch.rsqrt = lambda x, *a, **kw: original(x, *a, **kw) * 1.001


def drops_a_cycle_that_patches_torch(**args):
    """Drops an object in a reference cycle whose finalizer patches torch: it runs whenever the
    collector next runs, typically during a later case's launch."""
    out = _reference(**args)
    _PatchesOnCollect()
    return out
