"""Numbers and messages as text, the same everywhere they are shown."""
from __future__ import annotations

import re
from typing import Any, Mapping


def pct(x: Any) -> str:
    """A rate as a percentage: ``0%``, ``20.0%``, ``0.042%`` (two significant digits below 0.1%);
    ``-`` for what is not a number (None, NaN)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool) or x != x:
        return "-"
    if x in (0, 1):
        return f"{100 * x:.0f}%"
    return f"{100 * x:.2g}%" if x < 0.001 else f"{100 * x:.1f}%"


def one_line(text: str) -> str:
    """``text`` with every run of whitespace, newlines included, as one space: an error fits its line."""
    return " ".join(text.split())


# C0 controls but tab and newline, DEL, C1 controls, lone surrogates: ESC alone can recolour,
# retitle or clear the terminal, CR can overwrite what was printed before it on the line.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def printable(text: Any) -> str:
    """``text`` safe to print to a terminal: every control character but tab and newline shown
    as ``\\xNN`` (``\\uNNNN`` beyond a byte), so an id, a log line or an exception message from a
    kernel is shown as written instead of acting on the terminal."""
    text = str(text)
    if not _UNPRINTABLE.search(text):          # the common case: nothing to do
        return text
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                            else f"\\u{ord(m.group()):04x}", text)


def inputs_text(metrics: Any) -> str | None:
    """``256 MB, digest 1a2b3c4d`` from a result's ``inputs_bytes`` and ``inputs_digest``; None without them."""
    if not isinstance(metrics, Mapping) or not isinstance(metrics.get("inputs_bytes"), int):
        return None
    n = metrics["inputs_bytes"]
    size = next((f"{n / scale:.{1 if n < 10 * scale else 0}f} {unit}"
                 for scale, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")) if n >= scale), f"{n} B")
    return f"{size}, digest {metrics.get('inputs_digest', '-')}"


def blocking_rerun_text(metrics: Any) -> str | None:
    """``launch-blocking re-run (ASCEND_LAUNCH_BLOCKING=1): FAIL_507018 again, at kernels.py:21 in f``
    from a result's ``blocking_rerun``; None without one."""
    rerun = metrics.get("blocking_rerun") if isinstance(metrics, Mapping) else None
    if not isinstance(rerun, Mapping):
        return None
    head = f"launch-blocking re-run ({rerun.get('env', '?')}): "
    if rerun.get("reproduced"):
        head += f"{rerun.get('label')} again" if rerun.get("same_label") else f"reproduced as {rerun.get('label')}"
    else:
        head += f"did not reproduce ({rerun.get('label')})"
    where = rerun.get("where") or []
    return head + (f", at {where[-1]}" if where else "")


def device_log_text(metrics: Any) -> str | None:
    """The device runtime's log lines on a result (``device_log.text``, error lines first); None without."""
    found = metrics.get("device_log") if isinstance(metrics, Mapping) else None
    if not isinstance(found, Mapping) or not found.get("text"):
        return None
    files = found.get("files") or []
    return (f"device log ({len(files)} file{'s' if len(files) != 1 else ''} under {found.get('directory')}"
            f"{', truncated' if found.get('truncated') else ''}):\n{found['text']}")
