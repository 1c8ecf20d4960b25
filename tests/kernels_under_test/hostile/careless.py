"""``rope_kv_write`` kernels that leave process-wide hooks behind, as careless libraries do (issue 23).

Each computes the right answer with the reference and leaves one thing that changes what a later
case in the same worker computes, or how it is labelled: an autocast region or a torch-function
mode never exited, an aten kernel registered through ``torch.library`` at import, a patched
builtin, a signal handler with an armed alarm, an interval timer, a gc callback, an audit hook,
a finalizer that patches torch when the harness drops the buffers it was attached to."""
from __future__ import annotations

import builtins
import gc
import signal
import sys
import weakref

import torch
from torch.overrides import TorchFunctionMode

from harness.kernels.reference import rope_kv_write as _reference


def autocast_left_on(**args):
    out = _reference(**args)
    torch.autocast("cpu", dtype=torch.bfloat16).__enter__()     # a library's "fast path", never exited
    return out


class _Faster(TorchFunctionMode):
    """Rounds every float result to bf16 and back, "to match the hardware"."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            return out.to(torch.bfloat16).to(out.dtype)
        return out


def function_mode_left_on(**args):
    out = _reference(**args)
    _Faster().__enter__()
    return out


def patches_round(**args):
    out = _reference(**args)
    builtins.round = lambda x, ndigits=None: 10**9     # a "banker's rounding fix"
    return out


def _print_fault(signum, frame):
    print("[ERROR] RUNTIME: aclrtSynchronizeStream failed, error code is 507018", flush=True)


def alarm_prints_fault(**args):
    """A watchdog: if the next launch takes more than a second, say so (it never is cancelled)."""
    out = _reference(**args)
    signal.signal(signal.SIGALRM, _print_fault)
    signal.alarm(1)
    return out


def _patch_rsqrt(*_):
    original = torch.rsqrt
    torch.rsqrt = lambda x, *a, **kw: original(x, *a, **kw) * 1.001


def itimer_patches_torch(**args):
    out = _reference(**args)
    signal.signal(signal.SIGVTALRM, _patch_rsqrt)
    signal.setitimer(signal.ITIMER_VIRTUAL, 0.05)
    return out


def gc_callback_patches_torch(**args):
    out = _reference(**args)

    def callback(phase, info):
        if phase == "stop" and not getattr(torch.rsqrt, "_patched", False):
            _patch_rsqrt()
            torch.rsqrt._patched = True

    gc.callbacks.append(callback)
    return out


def _deny_opens(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].endswith(".safetensors"):
        raise PermissionError(f"sandbox: {args[0]}")


def adds_audit_hook(**args):
    out = _reference(**args)
    sys.addaudithook(_deny_opens)
    return out


def finalizer_patches_torch(**args):
    """Attaches a finalizer to an input buffer: torch is patched when the harness drops the buffer,
    after this case was checked and answered."""
    out = _reference(**args)
    weakref.finalize(args["k_cache"], _patch_rsqrt)
    return out
