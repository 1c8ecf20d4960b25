"""A CPU stand-in for torch-npu (test code; see ../README.md).

Presents the torch-npu surface the harness uses, on the CPU, so the ``npu:N`` path runs in CI:
``torch.npu`` (availability, count, current device, synchronize, events, streams, memory
info, names), ``torch_npu.__version__``, the private-use backend renamed ``npu``.  It honours
the environment a real Ascend host reads (``ASCEND_RT_VISIBLE_DEVICES``,
``ASCEND_PROCESS_LOG_PATH``, ``ASCEND_SLOG_PRINT_TO_STDOUT``, ``ASCEND_LAUNCH_BLOCKING``) and
writes plog-shaped files when a stand-in fault kernel asks for a fault.
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import sys
import time
import types
from pathlib import Path

import torch

__version__ = "2.13.0+standin"
PHYSICAL = int(os.environ.get("HARNESS_STANDIN_NPUS", "8"))   # NPUs the pretend host has
DEVICE_NAME = "Ascend910B3 (CPU stand-in)"


def _load_fake_accelerator():
    path = Path(__file__).resolve().parents[2] / "fake_accelerator.py"
    spec = importlib.util.spec_from_file_location("_standin_fake_accelerator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _visible() -> list[int]:
    """Physical ids in visible order, as the runtime reads ASCEND_RT_VISIBLE_DEVICES (an id the
    host lacks ends the list, as an invalid entry does there)."""
    text = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if text is None:
        return list(range(PHYSICAL))
    ids: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) >= PHYSICAL or int(part) in ids:
            break
        ids.append(int(part))
    return ids


class _Discard(list):
    def append(self, item) -> None:   # a worker runs for hours: count nothing
        pass


_fake = _load_fake_accelerator()
_current = 0
_pending: list[BaseException] = []     # a fault raised asynchronously: at the next synchronize


def _physical(index: int) -> int:
    visible = _visible()
    if not 0 <= index < len(visible):
        raise RuntimeError(f"NPU function error: aclrtSetDevice, error code is 107001 "
                           f"(invalid device ordinal {index}: {len(visible)} visible)")
    return visible[index]


def _touch(index: int) -> None:
    """Record the physical NPU behind ``index`` (the pinning test reads it); a lost one fails."""
    physical = _physical(index)
    lost = os.environ.get("HARNESS_STANDIN_LOST")
    if lost and (Path(lost) / str(physical)).exists():
        raise RuntimeError("NPU function error: aclrtSetDevice(deviceId), error code is 507033\n"
                           f"[ERROR] device {physical} is lost (stand-in)")
    trace = os.environ.get("HARNESS_STANDIN_TRACE")
    if trace and physical not in _touched:
        _touched.add(physical)
        Path(trace).mkdir(parents=True, exist_ok=True)
        with open(Path(trace) / str(os.getpid()), "a") as fh:
            fh.write(f"{physical}\n")


_touched: set[int] = set()


def _index_of(device) -> int | None:
    if isinstance(device, str) and device.startswith("npu"):
        return int(device.split(":")[1]) if ":" in device else _current
    if isinstance(device, torch.device) and device.type == "npu":
        return _current if device.index is None else device.index
    return None


class _Placement(_fake.FakeAccelerator):
    """The fake accelerator for ``npu``, checking that a placement names a visible NPU."""

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        index = _index_of((kwargs or {}).get("device"))
        if index is not None:
            _touch(index)
        return super().__torch_function__(func, types_, args, kwargs)


def _log_root() -> Path:
    return Path(os.environ.get("ASCEND_PROCESS_LOG_PATH") or Path.home() / "ascend" / "log")


def _stamp() -> str:
    now = datetime.datetime.now()
    return now.strftime("%Y-%m-%d-%H:%M:%S.") + f"{now.microsecond // 1000:03d}.{now.microsecond % 1000:03d}"


def _plog_lines(code: int, physical: int, kernel_name: str) -> list[str]:
    pid, stamp = os.getpid(), _stamp()
    head = f"RUNTIME({pid},python)"
    return [
        f"[INFO] ASCENDCL({pid},python):{stamp} [acl.cpp:226]{pid} aclInit: start to execute aclInit",
        f"[DEBUG] RUNTIME({pid},python):{stamp} [stream.cc:702]{pid} Setup: stream_id=3 created",
        f"[ERROR] {head}:{stamp} [device_error_proc.cc:1057]{pid} ProcessStarsCoreErrorInfo: The aicore execution "
        f"is abnormal, device_id={physical}, stream_id=3, report_stream_id=3, task_id=12, flip_num=0, fault "
        f"kernel_name={kernel_name}, fault kernel info ext=none, program id=41, hash=8126339101294453377.",
        f"[ERROR] {head}:{stamp} [device_error_proc.cc:1057]{pid} ProcessStarsCoreErrorInfo: The error from "
        f"device(chipId:{physical}, dieId:0), serial number is 17, there is an aicore error exception, core id "
        f"is 12, error code = 0x800000, dump info: pc start: 0x12c0c0212000, current: 0x12c0c0213a44, vec error "
        f"info: 0x1f0000c2, mte error info: 0x6e.",
        f"[ERROR] {head}:{stamp} [task_info.cc:1412]{pid} PrintErrorInfo: Kernel task happen error, "
        f"retCode=0x26, [aicore exception].",
        f"[INFO] RUNTIME({pid},python):{stamp} [stream.cc:1088]{pid} Synchronize: waiting for stream_id=3",
        f"[ERROR] {head}:{stamp} [stream.cc:1121]{pid} GetError: Stream Synchronize failed, stream_id=3, "
        f"retCode=0x91, [the model stream execute failed].",
        f"[ERROR] ASCENDCL({pid},python):{stamp} [stream.cpp:112]{pid} aclrtSynchronizeStreamWithTimeout: "
        f"synchronize stream with timeout failed, runtime result = {code}",
    ]


_WRAPPER = ("The Inner error is reported as above. The process exits for this inner error, and the current "
            "working operator name is {op}.\nSince the operator is called asynchronously, the stacktrace may be "
            "inaccurate. If you want to get the accurate stacktrace, please set the environment variable "
            "ASCEND_LAUNCH_BLOCKING=1.\nNote: ASCEND_LAUNCH_BLOCKING=1 will force ops to run in synchronous "
            "mode, resulting in performance degradation. Please unset ASCEND_LAUNCH_BLOCKING in time after "
            "debugging.")


def standin_fault(code: int = 507018, kernel_name: str = "fused_rope_decode_attention_mix_aiv",
                  op: str = "FusedRopeDecodeAttention", lose_device: bool = False) -> None:
    """What a stand-in fault kernel calls: the runtime's detail goes to the plog (or stdout with
    ASCEND_SLOG_PRINT_TO_STDOUT=1), the exception carries torch-npu's wrapper only.  Raised at
    the next ``synchronize`` (asynchronous launch), or here with ASCEND_LAUNCH_BLOCKING=1."""
    physical = _physical(_current)
    lines = _plog_lines(code, physical, kernel_name)
    if os.environ.get("ASCEND_SLOG_PRINT_TO_STDOUT") == "1":
        print("\n".join(lines), flush=True)
    else:
        folder = _log_root() / "debug" / "plog"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"plog-{os.getpid()}_{datetime.datetime.now():%Y%m%d%H%M%S%f}.log"
        with open(folder / name, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    if lose_device and os.environ.get("HARNESS_STANDIN_LOST"):
        Path(os.environ["HARNESS_STANDIN_LOST"]).mkdir(parents=True, exist_ok=True)
        (Path(os.environ["HARNESS_STANDIN_LOST"]) / str(physical)).touch()
    error = RuntimeError(_WRAPPER.format(op=op))
    if os.environ.get("ASCEND_LAUNCH_BLOCKING") == "1":
        raise error
    _pending.append(error)


def _synchronize(device=None) -> None:
    if _pending:           # the fault a launch left behind comes first, as the stream's error
        raise _pending.pop()
    _touch(_current if device is None else (_index_of(device) if not isinstance(device, int) else device))


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self._ns: int | None = None

    def record(self, stream=None) -> None:
        self._ns = time.perf_counter_ns()

    def synchronize(self) -> None:
        _synchronize()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "Event") -> float:
        return (end._ns - self._ns) / 1e6      # milliseconds, as torch's events


class Stream:
    def __init__(self, device=None, priority: int = 0):
        self.device = torch.device("npu", _current)

    def synchronize(self) -> None:
        _synchronize()

    def wait_stream(self, other) -> None:
        pass


def _set_device(device) -> None:
    global _current
    index = device if isinstance(device, int) else _index_of(device)
    _touch(index)
    _current = index


def _mem_get_info(device=None) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
    kib = lambda name: int(fields[name].split()[0]) * 1024   # noqa: E731
    return kib("MemAvailable"), kib("MemTotal")


npu = types.ModuleType("torch.npu")
npu.is_available = lambda: len(_visible()) > 0
npu.device_count = lambda: len(_visible())
npu.current_device = lambda: _current
npu.set_device = _set_device
npu.synchronize = _synchronize
npu.Event = Event
npu.Stream = Stream
npu.current_stream = lambda device=None: Stream(device)
npu.mem_get_info = _mem_get_info
npu.get_device_name = lambda device=None: DEVICE_NAME
npu.memory_allocated = lambda device=None: 0
npu.empty_cache = lambda: None
npu.is_initialized = lambda: True
npu.manual_seed = lambda seed: None
npu.standin_fault = standin_fault

if not hasattr(torch, "npu"):
    torch.utils.rename_privateuse1_backend("npu")
    torch.npu = npu
    sys.modules["torch.npu"] = npu
    _mode = _Placement(torch.device("npu", 0))
    _mode.transfers = _Discard()
    _mode.__enter__()            # for the life of the process, as torch-npu's backend is
