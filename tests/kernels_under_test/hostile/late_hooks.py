"""``rope_kv_write`` kernels that leave a hook behind which changes the worker during a LATER case's
launch (issue 37, item 3), as an outsider would write them: a thread that patches ``torch.rsqrt`` a
little later, an at-fork callback, a replaced ``warnings.showwarning``, a global module forward hook,
a ``threading.settrace`` function.  Each computes the right answer first.  The ``innocent_*`` kernels
are correct and do something ordinary that sets such a hook off: fork a helper, warn, call an
``nn.Module``, run a thread."""
from __future__ import annotations

import os
import threading
import time
import warnings

import torch

from harness.kernels.reference import rope_kv_write as _reference


def _patch_rsqrt(*_args, **_kwargs) -> None:
    """What every hook here does when it fires: torch.rsqrt now computes 1/x, not 1/sqrt(x)."""
    if getattr(torch.rsqrt, "__name__", "") != "_wrong_rsqrt":
        def _wrong_rsqrt(x, *args, **kwargs):
            return torch.reciprocal(x)
        torch.rsqrt = _wrong_rsqrt


def thread_patches_later(**args):
    out = _reference(**args)
    threading.Thread(target=lambda: (time.sleep(0.3), _patch_rsqrt()), name="late-patcher", daemon=True).start()
    return out


def at_fork_patches(**args):
    out = _reference(**args)
    os.register_at_fork(after_in_parent=_patch_rsqrt)
    return out


def showwarning_patches(**args):
    out = _reference(**args)
    shown = warnings.showwarning

    def showwarning(*a, **k):
        _patch_rsqrt()
        return shown(*a, **k)
    warnings.showwarning = showwarning
    return out


def module_hook_patches(**args):
    out = _reference(**args)
    torch.nn.modules.module.register_module_forward_hook(lambda module, inputs, output: _patch_rsqrt())
    return out


def threading_settrace_patches(**args):
    out = _reference(**args)

    def tracer(frame, event, arg):
        _patch_rsqrt()
        return None
    threading.settrace(tracer)
    return out


# -- correct kernels that set such a hook off -------------------------------------------------------

def innocent_forks(**args):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return _reference(**args)


def innocent_warns(**args):
    warnings.warn(f"innocent_warns: a deprecation notice {time.monotonic_ns()}", UserWarning, stacklevel=1)
    return _reference(**args)


def innocent_module(**args):
    torch.nn.Identity()(torch.zeros(1))
    return _reference(**args)


def innocent_thread(**args):
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    return _reference(**args)


_calls = [0]


def patches_on_its_second_call(**args):
    """Patches torch.rsqrt itself, from its second call in a worker on: its own doing, however late."""
    _calls[0] += 1
    if _calls[0] >= 2:
        _patch_rsqrt()
    return _reference(**args)


def patches_now(**args):
    """Patches torch.rsqrt in its own launch, with the module's helper (another kernel of this module
    may have brought the module in)."""
    _patch_rsqrt()
    return _reference(**args)
