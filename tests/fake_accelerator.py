"""A CPU stand-in for an accelerator, for tests of code that must keep its data where it lives.

No GPU or NPU runs in CI, yet the checks must run on the device that holds the outputs (a
10 GB cache is not copied to the host to be compared).  ``FakeAccelerator`` lets a CPU test
hold code to a device's rules:

- a tensor "on" the fake device is a CPU tensor of the subclass ``OnDevice``; its
  ``.device`` reads ``cuda:0`` (``FAKE``, or the device the mode was made for: the NPU
  stand-in, ``tests/npu_standin``, makes one for ``npu:0``), so code that places new tensors
  with ``device=t.device`` puts them there too;
- factories and ``.to``/``.cuda`` given that device make ``OnDevice`` tensors;
- an op that mixes an ``OnDevice`` tensor with a host tensor of one or more dims raises, as
  CUDA does ("Expected all tensors to be on the same device"); host scalars (0-dim) and host
  index tensors inside ``[]`` are allowed, as there;
- every read back to the host is recorded in ``transfers`` as ``(what, elements)``:
  ``.cpu()``, ``.to("cpu")``, ``.tolist()``, ``.item()``, ``bool``/``int``/``float``, and a
  ``copy_`` into a host tensor; ``.numpy()`` of a device tensor raises, as on CUDA.

Only what the harness's checks and launches use is modelled; arithmetic runs on the CPU.
"""
from __future__ import annotations

from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode

FAKE = torch.device("cuda", 0)

_READS = {torch.Tensor.tolist, torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__int__,
          torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.__format__}
_INDEXING = {torch.Tensor.__getitem__, torch.Tensor.__setitem__}
_MOVES = {torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.copy_}


class OnDevice(torch.Tensor):
    """A tensor on the fake accelerator (its bytes are on the CPU)."""


def _on_device(t: Any) -> bool:
    return isinstance(t, OnDevice)


def _tensors(values: Any) -> Iterator[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def _is_fake(device: Any, kind: str = "cuda") -> bool:
    if isinstance(device, str):
        return device.startswith(kind)
    return isinstance(device, torch.device) and device.type == kind


def _is_host(device: Any) -> bool:
    if isinstance(device, str):
        return device == "cpu"
    return isinstance(device, torch.device) and device.type == "cpu"


def _mark(value: Any, on_device: bool) -> Any:
    """``value``'s tensors as device (``OnDevice``) or host (plain) tensors."""
    if isinstance(value, torch.Tensor):
        with torch._C.DisableTorchFunctionSubclass():
            return value.as_subclass(OnDevice if on_device else torch.Tensor)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_mark(v, on_device) for v in value)
    if isinstance(value, list):
        return [_mark(v, on_device) for v in value]
    return value


class FakeAccelerator(TorchFunctionMode):
    """While active, ``FAKE`` behaves as an accelerator (see the module docstring)."""

    def __init__(self, device: torch.device = FAKE) -> None:
        super().__init__()
        self.device = device
        self.transfers: list[tuple[str, int]] = []

    @property
    def elements_read(self) -> int:
        return sum(n for _, n in self.transfers)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        owner = getattr(func, "__self__", None)
        if owner is torch.Tensor.device or owner is torch._C.TensorBase.device:     # the .device property
            return self.device if _on_device(args[0]) else torch.device("cpu")
        if owner is torch._C.TensorBase.is_cuda:
            return _on_device(args[0]) and self.device.type == "cuda"
        if owner is torch._C.TensorBase.is_cpu:
            return not _on_device(args[0])
        name = getattr(func, "__name__", str(func))
        if func is torch.Tensor.numpy and _on_device(args[0]):
            raise TypeError(f"can't convert {self.device} device type tensor to numpy (fake accelerator)")
        if func in _READS and _on_device(args[0]):
            self.transfers.append((name, args[0].numel()))
        if func in _MOVES:
            return self._move(func, name, args, kwargs)
        self._refuse_mixed(name, func, args, kwargs, self.device)
        placed = False
        if "device" in kwargs and self.is_fake(kwargs["device"]):
            kwargs["device"] = "cpu"
            placed = True
        result = func(*args, **kwargs)
        if placed:
            return _mark(result, True)
        return result

    def _move(self, func, name: str, args, kwargs):
        src = args[0]
        if func is torch.Tensor.copy_:       # copies across devices are allowed; one into the host is a read
            if _on_device(args[1]) and not _on_device(src):
                self.transfers.append((name, args[1].numel()))
            return func(*args, **kwargs)
        if func is torch.Tensor.cpu:
            target: Any = "cpu"
        elif func is torch.Tensor.cuda:
            target = self.device
        else:
            target = kwargs.pop("device", None)
            rest = []
            for a in args[1:]:
                if isinstance(a, (str, torch.device)):
                    target = a
                elif isinstance(a, torch.Tensor):         # .to(other): its device and dtype
                    target = self.device if _on_device(a) else "cpu"
                    rest.append(a.dtype)
                else:
                    rest.append(a)
            args = (src, *rest)
        if target is None:
            return func(*args, **kwargs)
        to_device = self.is_fake(target)
        if not to_device and not _is_host(target):
            raise RuntimeError(f"fake accelerator: unexpected device {target!r}")
        if _on_device(src) and not to_device:
            self.transfers.append((name, src.numel()))
        if func in (torch.Tensor.cpu, torch.Tensor.cuda):
            result = func(*args, **kwargs) if func is torch.Tensor.cpu else src
        else:
            result = func(*args, **kwargs)
        if to_device == _on_device(src) and result is src:
            return result
        with torch._C.DisableTorchFunctionSubclass():
            fresh = result.clone() if result is src else result   # a move makes a new tensor
        return _mark(fresh, to_device)

    def is_fake(self, device: Any) -> bool:
        """``device`` names this fake accelerator (any index of its kind: one is modelled)."""
        return _is_fake(device, self.device.type)

    @staticmethod
    def _refuse_mixed(name: str, func, args, kwargs, device: torch.device = FAKE) -> None:
        considered = list(args[:1]) + list(args[2:]) if func in _INDEXING else list(args)
        tensors = list(_tensors([*considered, *kwargs.values()]))
        if not any(_on_device(t) for t in tensors):
            return
        host = [t for t in tensors if not _on_device(t) and t.dim() > 0]
        if host:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{device} and cpu! ({name}: a host tensor of shape {tuple(host[0].shape)}; "
                               f"fake accelerator)")
