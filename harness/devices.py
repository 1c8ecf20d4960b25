"""Device names and the per-kind backend (presence, synchronize, torch device).

Parsing (``npu:6``, ``cuda:0-3``, ``cpu``) is pure and used by the front end.
Backends are used inside the device worker only; each is small and
registered by kind, so a new accelerator is one class, not an ``if`` chain.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from harness.errors import UsageError

_DEVICE_RE = re.compile(r"^(cpu|cuda|npu)(?::(\d+))?$")
_RANGE_RE = re.compile(r"^(cuda|npu):(\d+)-(\d+)$")
MAX_DEVICES = 1024      # one worker each: a range past this is a typo, not a machine
MEMINFO = Path("/proc/meminfo")
MEMORY_PROBE_TIMEOUT_S = 120.0   # importing torch (and torch-npu, which initialises CANN)


class DeviceError(UsageError):
    pass


@dataclass(frozen=True, order=True)
class Device:
    kind: str                 # cpu | cuda | npu
    index: int | None = None

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"


def parse_device(text: str, where: str = "--device") -> Device:
    m = _DEVICE_RE.match(text.strip())
    if not m:
        raise DeviceError(
            f"{where}: invalid device {text!r} (expected cpu, cuda:N or npu:N, e.g. npu:6)"
        )
    kind, index = m.group(1), m.group(2)
    if kind == "cpu":
        if index is not None:
            raise DeviceError(f"{where}: invalid device {text!r} (cpu takes no index)")
        return Device("cpu")
    return Device(kind, int(index) if index is not None else 0)


def parse_device_list(text: str, where: str = "--devices") -> list[Device]:
    """``npu:0-7``, ``cuda:0,cuda:2``, ``cpu,cpu`` (two CPU workers)."""
    devices: list[Device] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _RANGE_RE.match(part)
        if m:
            kind, lo, hi = m.group(1), int(m.group(2)), int(m.group(3))
            if lo > hi:
                raise DeviceError(f"{where}: empty device range {part!r}")
            if hi - lo + 1 + len(devices) > MAX_DEVICES:
                raise DeviceError(f"{where}: {part!r} makes more than {MAX_DEVICES} devices")
            devices.extend(Device(kind, i) for i in range(lo, hi + 1))
        else:
            devices.append(parse_device(part, where))
    if not devices:
        raise DeviceError(f"{where}: no devices in {text!r}")
    return devices


@dataclass(frozen=True)
class Memory:
    """Bytes a device has free now and in all."""

    available: int
    total: int


def host_memory(meminfo: Path = MEMINFO) -> Memory | None:
    """The host's ``MemAvailable`` and ``MemTotal``; None where there is no /proc/meminfo (not Linux)."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    if "MemAvailable" not in fields or "MemTotal" not in fields:
        return None
    return Memory(fields["MemAvailable"], fields["MemTotal"])


def accelerator_memory(devices: list[Device], env: dict[str, str]) -> dict[Device, Memory | None]:
    """Each accelerator's free and total memory, asked in a short-lived interpreter with the
    workers' environment (the front end imports no device runtime); None where it cannot say."""
    wanted = list(dict.fromkeys(d for d in devices if d.kind != "cpu"))
    if not wanted:
        return {}
    code = "import sys; from harness.devices import memory_probe_main; memory_probe_main(sys.argv[1:])"
    try:
        done = subprocess.run([sys.executable, "-c", code, *map(str, wanted)], env=env, capture_output=True,
                              text=True, timeout=MEMORY_PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, IndexError, json.JSONDecodeError):
        return {d: None for d in wanted}   # no figure: the case runs, as it did before the plan
    return {d: Memory(*found[str(d)]) if found.get(str(d)) else None for d in wanted}


# -- one device per worker -------------------------------------------------------
# A worker for npu:6 sees that NPU alone (as its npu:0), so a kernel that allocates on "the
# current device" or on device 0 cannot touch another worker's NPU.  Where the user's own
# environment already narrows the visible devices, the case's index counts in that list.
VISIBLE_ENV = {"npu": "ASCEND_RT_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}
LOCAL_INDEX_ENV = "HARNESS_LOCAL_DEVICE_INDEX"   # the worker's torch index for its device
DEVICE_ENV = "HARNESS_DEVICE"                    # the device as the case names it (npu:6)


def pinning_env(device: Device, env: dict[str, str]) -> dict[str, str]:
    """What a worker for ``device`` adds to ``env`` (the environment it would start with) so
    that it sees only that device.  Nothing for the CPU, nor where ``env``'s visible list has
    no entry ``device.index`` (the worker then finds the device absent, with that reason)."""
    var = VISIBLE_ENV.get(device.kind)
    if var is None:
        return {DEVICE_ENV: str(device)}
    listed = [e.strip() for e in env.get(var, "").split(",") if e.strip()] if env.get(var) else None
    if listed is not None and device.index >= len(listed):
        return {DEVICE_ENV: str(device)}
    physical = listed[device.index] if listed is not None else str(device.index)
    return {var: physical, LOCAL_INDEX_ENV: "0", DEVICE_ENV: str(device)}


def local_device(device: Device, env=None) -> Device:
    """The torch device a pinned worker uses for ``device`` (its only visible one)."""
    env = os.environ if env is None else env
    index = env.get(LOCAL_INDEX_ENV)
    if device.kind == "cpu" or index is None or not index.isdigit():
        return device
    return Device(device.kind, int(index))


# -- worker side ----------------------------------------------------------------

class Backend:
    """What the worker needs of a device kind."""

    kind = ""

    def absent_reason(self, device: Device) -> str | None:
        raise NotImplementedError

    def torch_device(self, device: Device):
        import torch
        return torch.device(str(device))

    def synchronize(self, device: Device) -> None:
        pass

    def describe(self, device: Device) -> dict[str, str]:
        import torch
        return {"torch": torch.__version__}

    def memory(self, device: Device) -> Memory | None:
        return None

    def activate(self, device: Device) -> None:
        """Make ``device`` the current one, before any kernel is imported (a kernel that
        allocates on "the current device" lands on its own)."""

    def health(self, device: Device) -> str | None:
        """None when a tiny op runs and synchronizes on ``device``; else why not."""
        try:
            import torch
            x = torch.ones(8, device=self.torch_device(device))
            value = float((x * 2).sum().item())
            self.synchronize(device)
        except Exception as exc:   # whatever the runtime raises is the reason
            return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        return None if value == 16.0 else f"a tiny op gave {value} (expected 16.0)"

    def events(self, device: Device):
        """The torch module whose ``Event(enable_timing=True)`` times work on the device's current
        stream (``torch.cuda``, ``torch.npu``), for latency samples; None: the host's clock around a
        synchronize (harness/worker/timing.py)."""
        return None

    def cache_bytes(self, device: Device) -> int:
        """Bytes written between samples to evict the device's caches (a cold sample): above the
        largest last-level cache of the devices we run on (H200 L2 50 MB, Ascend 910B L2 192 MB)."""
        return 256 << 20


class CpuBackend(Backend):
    kind = "cpu"

    def absent_reason(self, device: Device) -> str | None:
        return None

    def memory(self, device: Device) -> Memory | None:
        return host_memory()

    def cache_bytes(self, device: Device) -> int:
        return 64 << 20         # above the last-level cache of the hosts we run on

    def describe(self, device: Device) -> dict[str, str]:
        import platform
        return {**super().describe(device), "device_name": platform.processor() or platform.machine()}


class CudaBackend(Backend):
    kind = "cuda"

    def absent_reason(self, device: Device) -> str | None:
        import torch
        if not torch.cuda.is_available():
            return "CUDA is not available in this torch build or on this machine"
        if device.index >= torch.cuda.device_count():
            return f"{device} not present ({torch.cuda.device_count()} CUDA devices)"
        return None

    def synchronize(self, device: Device) -> None:
        import torch
        torch.cuda.synchronize(device.index)

    def activate(self, device: Device) -> None:
        import torch
        torch.cuda.set_device(device.index)

    def events(self, device: Device):
        import torch
        return torch.cuda

    def memory(self, device: Device) -> Memory | None:
        import torch
        free, total = torch.cuda.mem_get_info(device.index)
        return Memory(int(free), int(total))

    def describe(self, device: Device) -> dict[str, str]:
        import torch
        try:
            import pynvml                   # nvidia-ml-py, where installed
            pynvml.nvmlInit()
            driver_text = pynvml.nvmlSystemGetDriverVersion()
            driver_text = driver_text.decode() if isinstance(driver_text, bytes) else driver_text
        except Exception:  # optional: no NVML here
            driver_text = "unknown"
        return {
            **super().describe(device),
            "device_name": torch.cuda.get_device_name(device.index),
            "cuda": str(torch.version.cuda),
            "cuda_driver": driver_text,
        }


class NpuBackend(Backend):
    """Written to the torch-npu API (``torch.npu``); not run on hardware in this project's CI."""

    kind = "npu"

    def absent_reason(self, device: Device) -> str | None:
        try:
            import torch
            import torch_npu  # noqa: F401  (registers torch.npu)
        except ImportError as exc:
            return f"torch-npu is not installed ({exc})"
        if not torch.npu.is_available():
            return "no NPU visible to torch-npu"
        if device.index >= torch.npu.device_count():
            return f"{device} not present ({torch.npu.device_count()} NPUs)"
        return None

    def synchronize(self, device: Device) -> None:
        import torch
        torch.npu.synchronize(device.index)

    def activate(self, device: Device) -> None:
        import torch
        torch.npu.set_device(device.index)

    def events(self, device: Device):
        import torch
        import torch_npu  # noqa: F401  (registers torch.npu)
        return torch.npu

    def memory(self, device: Device) -> Memory | None:
        import torch
        import torch_npu  # noqa: F401  (registers torch.npu)
        free, total = torch.npu.mem_get_info(device.index)
        return Memory(int(free), int(total))

    def describe(self, device: Device) -> dict[str, str]:
        import torch
        import torch_npu

        from harness.provenance import cann_version
        return {
            **super().describe(device),
            "device_name": torch.npu.get_device_name(device.index),
            "torch_npu": getattr(torch_npu, "__version__", "unknown"),
            "cann": cann_version() or "unknown",
        }


# Peak memory bandwidth by device name (a substring of ``describe()["device_name"]``, first match;
# more specific names first), bytes/s: the vendors' datasheet figures.  ``$HARNESS_PEAK_GBPS``
# overrides it (GB/s) for any device, e.g. one not in the table (an Ascend NPU: set it).
PEAK_BYTES_PER_S: tuple[tuple[str, float], ...] = (
    ("H200", 4.8e12),
    ("H100 PCIe", 2.0e12),
    ("H100", 3.35e12),          # SXM
    ("A100-SXM4-80GB", 2.039e12),
    ("A100 80GB PCIe", 1.935e12),
    ("A100", 1.555e12),         # 40 GB
    ("L40S", 0.864e12),
)
PEAK_ENV = "HARNESS_PEAK_GBPS"


def peak_bytes_per_s(device_name: str, environ: Mapping[str, str] = os.environ) -> tuple[float, str] | None:
    """(peak bytes/s, where the figure came from) for ``device_name``; None when unknown."""
    if environ.get(PEAK_ENV):
        return float(environ[PEAK_ENV]) * 1e9, f"${PEAK_ENV}"
    for needle, peak in PEAK_BYTES_PER_S:
        if needle.lower() in device_name.lower():
            return peak, f"table: {needle}"
    return None


BACKENDS: dict[str, Callable[[], Backend]] = {"cpu": CpuBackend, "cuda": CudaBackend, "npu": NpuBackend}


def backend(device: Device) -> Backend:
    return BACKENDS[device.kind]()


def probe_main(names: list[str]) -> None:
    """Print, as one JSON line, each named device's ``absent_reason`` (null: present).  Run in a
    short-lived interpreter by the front end, which imports no device runtime itself."""
    import json
    print(json.dumps({name: backend(parse_device(name)).absent_reason(parse_device(name)) for name in names}))


def memory_probe_main(names: list[str]) -> None:
    """Print, as one JSON line, each named device's ``[available, total]`` bytes (null: unknown, or
    absent).  Run in a short-lived interpreter by ``accelerator_memory``."""
    found = {}
    for name in names:
        device = parse_device(name)
        try:
            memory = None if backend(device).absent_reason(device) else backend(device).memory(device)
        except Exception:  # no figure: the front end lets the case run
            memory = None
        found[name] = None if memory is None else [memory.available, memory.total]
    print(json.dumps(found))
