"""The worker's operating-system state a kernel can change for every later case in it.

What ``hygiene`` snapshots besides Python's and torch's state (issue 37, item 2): each item is
process-wide, outlives the kernel's case, and makes a later case fail or slow down for a reason
that is not its own:

- resource limits (``getrlimit`` of every ``RLIMIT_*``): a soft ``RLIMIT_FSIZE`` of 0 makes every
  later file write ``EFBIG``, a soft ``RLIMIT_NOFILE`` of 10 every ``open`` ``EMFILE``.  A soft
  limit is put back; a lowered hard limit cannot be raised again by an unprivileged process;
- open descriptors (number → target, from ``/proc/self/fd``): a kernel that opens a file per call
  and never closes it reaches the limit some cases later.  None is closed here (a Python object
  may still own the number): the worker is replaced;
- CPU affinity and the nice value (of the worker's main thread, which runs the cases): a worker
  pinned to one CPU at nice 19 runs every later case slowly.  Affinity is put back; a nice value
  cannot be lowered again without privilege;
- files the kernel created in ``/dev/shm``: memory that outlives the run.  Other processes of this
  user share ``/dev/shm`` (a browser, another test's worker, a parallel run), so a file that
  appears during the window is the kernel's only if this process opened it (the worker's audit
  hook records every ``open`` of a ``/dev/shm`` path: ``note_open``) or holds it at the window's
  end (a descriptor or a mapping: ``shm_open`` from C, torch's shared tensors).  A file made from
  C code and released before the window ends is not seen.  Named, not removed (the harness deletes
  no file it cannot prove is the kernel's).  multiprocessing's semaphores (``sem.mp-*``) are not
  counted: any Python process makes and unlinks them.

Descriptors and ``/dev/shm`` are compared inside a case's window only (``window_changes``): the
harness opens the case log around the window, and other processes share ``/dev/shm``.
"""
from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

def _distinct_limits() -> tuple[tuple[str, int], ...]:
    """Every ``RLIMIT_*`` once, by name; an alias (RLIMIT_OFILE is RLIMIT_NOFILE on Linux) is read once,
    named by the first of its names."""
    by_number: dict[int, str] = {}
    for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
        by_number.setdefault(getattr(resource, name), name)
    return tuple(sorted(((name, which) for which, name in by_number.items())))


RLIMITS: tuple[tuple[str, int], ...] = _distinct_limits()
_WHICH = tuple(which for _, which in RLIMITS)
SHM = "/dev/shm"
_MAX_NAMED = 5


@dataclass(frozen=True)
class OsState:
    """One reading (cheap: a few syscalls, one listing of /proc/self/fd and /dev/shm)."""

    rlimits: tuple[tuple[int, int], ...]      # (soft, hard) per RLIMITS entry
    fds: tuple[str, ...] | None               # /proc/self/fd's listing (its own descriptor in it); None: could not be
    affinity: frozenset[int] | None           # None where there is no sched_getaffinity
    nice: int | None
    shm: frozenset[str] | None                # names in /dev/shm; None where there is none
    at_ns: int                                # when it was read (a /dev/shm file changed after: the window's)
    opened_shm: frozenset[str] = frozenset()  # /dev/shm names this process opened since the last reading


def _fds() -> tuple[str, ...] | None:
    """The open descriptors' numbers, as /proc/self/fd lists them, less the listing's own."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:                  # EMFILE (a kernel used up the limit), or no /proc
        return None
    # the listing's own descriptor was the lowest free number, and is closed now: the lowest free
    # number again, which one dup tells (two syscalls, not one fstat per descriptor below it)
    try:
        own = os.dup(int(min(names, key=int)))
        os.close(own)
    except (OSError, ValueError):
        own = None
    if own is None or str(own) not in names:
        return _fds_by_fstat(names)
    names.remove(str(own))
    return tuple(names)


def _fds_by_fstat(names: list[str]) -> tuple[str, ...]:
    """The same, where no descriptor could be duplicated: the first listed that is not open is it."""
    for fd in sorted(names, key=int):
        try:
            os.fstat(int(fd))
        except OSError:
            names.remove(fd)
            break
    return tuple(names)


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:                  # the listing's own descriptor, closed since
        return ""


def _affinity() -> frozenset[int] | None:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _nice() -> int | None:
    try:
        return os.getpriority(os.PRIO_PROCESS, 0)
    except (AttributeError, OSError):
        return None


def _shm() -> frozenset[str] | None:
    try:
        return frozenset(os.listdir(SHM))
    except OSError:
        return None


_SHM_PREFIX = SHM + "/"
_opened_shm: set[str] = set()


def note_open(path: object) -> None:
    """The audit hook's ``open`` event (builtins ``open``, ``os.open``, ``io.open``): a path in
    ``/dev/shm`` is recorded as this process's.  Cheap for every other path (one prefix test)."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if isinstance(path, str) and path.startswith(_SHM_PREFIX):
        _opened_shm.add(os.path.basename(path.rstrip("/")))


def _take_opened() -> frozenset[str]:
    opened = frozenset(_opened_shm)
    _opened_shm.clear()
    return opened


def _held(fds: tuple[str, ...] | None) -> set[str]:
    """The ``/dev/shm`` names this process holds: through a descriptor (of ``fds``, the reading's
    listing) or a mapping."""
    held = set()
    for fd in fds or ():
        target = _target(fd)
        if target.startswith(_SHM_PREFIX):
            held.add(target[len(_SHM_PREFIX):].removesuffix(" (deleted)"))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                at = line.find(_SHM_PREFIX)
                if at >= 0:
                    held.add(line[at + len(_SHM_PREFIX):].rstrip("\n").removesuffix(" (deleted)"))
    except OSError:
        pass
    return held


def read() -> OsState:
    return OsState(opened_shm=_take_opened(), rlimits=tuple(map(resource.getrlimit, _WHICH)), fds=_fds(),
                   affinity=_affinity(), nice=_nice(), shm=_shm(), at_ns=time.time_ns())


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def changes(before: OsState, after: OsState) -> list[str]:
    """Limits, affinity and nice value (what ``drift`` compares with the worker's start too)."""
    out = []
    for (name, _), (soft0, hard0), (soft1, hard1) in zip(RLIMITS, before.rlimits, after.rlimits):
        if soft1 != soft0:
            out.append(f"resource limit {name} soft {_limit(soft0)} → {_limit(soft1)}")
        if hard1 != hard0:
            out.append(f"resource limit {name} hard {_limit(hard0)} → {_limit(hard1)}"
                       + (" (cannot be raised again)" if hard1 != resource.RLIM_INFINITY and
                          (hard0 == resource.RLIM_INFINITY or hard1 < hard0) else ""))
    if before.affinity != after.affinity and after.affinity is not None:
        out.append(f"CPU affinity {_cpus(before.affinity)} → {_cpus(after.affinity)}")
    if before.nice != after.nice and after.nice is not None:
        out.append(f"nice value {before.nice} → {after.nice}"
                   + (" (cannot be lowered again)" if before.nice is not None and after.nice > before.nice else ""))
    return out


def window_changes(before: OsState, after: OsState) -> list[str]:
    """What a kernel's window left: descriptors opened and not closed, files left in /dev/shm."""
    out = []
    open_before = len(before.fds or ())
    if after.fds is None and before.fds is not None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        out.append(f"no descriptor free: /proc/self/fd could not be listed after the launch "
                   f"({open_before} open before it, RLIMIT_NOFILE soft {_limit(soft)})")
    elif after.fds is not None and before.fds is not None and after.fds != before.fds:
        new = sorted(set(after.fds) - set(before.fds), key=int)
        targets = [(fd, _target(fd)) for fd in new]
        left = [(fd, t) for fd, t in targets if t]      # "": the listing's own descriptor, gone
        if left:
            named = ", ".join(f"{fd} → {t}" for fd, t in left[:_MAX_NAMED])
            more = f", and {len(left) - _MAX_NAMED} more" if len(left) > _MAX_NAMED else ""
            out.append(f"{len(left)} descriptor(s) open ({open_before} → {open_before + len(left)}): "
                       f"{named}{more}")
    if before.shm is not None and after.shm is not None and after.shm != before.shm:
        appeared = [n for n in after.shm - before.shm if _created_by_us(n, before.at_ns)]
        held = _held(after.fds) if not set(appeared) <= after.opened_shm else set()
        mine = sorted(n for n in appeared if n in after.opened_shm or n in held)
        if mine:
            out.append(f"{len(mine)} file(s) in {SHM}: " + ", ".join(mine[:_MAX_NAMED])
                       + (f", and {len(mine) - _MAX_NAMED} more" if len(mine) > _MAX_NAMED else ""))
    return out


# multiprocessing's POSIX semaphores (``sem.mp-<random>``): created by any Python process of this user
# that starts one (a forkserver, a resource tracker, another test's pool) and unlinked at once, so
# another process's may sit there during a window; counted against a kernel they were false alarms.
_OTHERS_SEMAPHORES = "sem.mp-"


def _created_by_us(name: str, since_ns: int) -> bool:
    if name.startswith(_OTHERS_SEMAPHORES):
        return False
    try:
        st = os.lstat(os.path.join(SHM, name))
    except OSError:
        return False
    return st.st_uid == os.getuid() and st.st_ctime_ns >= since_ns - 1_000_000_000


def _cpus(cpus: frozenset[int] | None) -> str:
    if cpus is None:
        return "?"
    ordered, runs = sorted(cpus), []
    for cpu in ordered:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return "{" + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) + "}"


def restore(before: OsState, after: OsState) -> None:
    """Put back what an unprivileged process can: soft limits (up to the hard limit now), the CPU
    affinity.  A lowered hard limit, a raised nice value and open descriptors stay: the worker is
    replaced."""
    for (_, which), old, new in zip(RLIMITS, before.rlimits, after.rlimits):
        if old != new:
            soft, hard = old[0], new[1]
            if hard != resource.RLIM_INFINITY and (soft == resource.RLIM_INFINITY or soft > hard):
                soft = hard
            try:
                resource.setrlimit(which, (soft, hard))
            except (OSError, ValueError):
                pass
    if before.affinity is not None and before.affinity != after.affinity:
        try:
            os.sched_setaffinity(0, before.affinity)
        except OSError:
            pass
    if before.nice is not None and after.nice is not None and after.nice != before.nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, before.nice)
        except OSError:
            pass
