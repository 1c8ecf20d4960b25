"""Run cases on a kernel-library ref: worktree, environment, build, then the usual engine run.

Compare and bisect hold everything fixed (harness, goldens, cases) and switch only
the kernel library's checkout.  ``RefRunner.prepare`` materialises a commit as a
cached worktree (``harness.refs.worktrees``), expands the ``--env`` templates against it and
runs the ``--build`` command once; ``RefRunner.run`` runs planned cases on it in
fresh device workers whose environment is the ref's (a new ``Engine`` per ref:
workers never outlive the environment they were started with).  A ref whose
build failed gets a ``BUILD_ERROR`` result per planned case, recorded like any
other, so tables and the store show it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from harness import refs
from harness.run.engine import Engine, Planned, RunOptions
from harness.outcomes import Outcome, Result
from harness.run.pool import case_fields
from harness.logs import log_tail
from harness.run.session import Addendum, Recorded, execute, recording
from harness.store import Store

DEFAULT_ENV = ("PYTHONPATH={worktree}:{PYTHONPATH}",)
DEFAULT_BUILD_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class RefSetup:
    """How every ref of a session is turned into a runnable checkout (from the CLI flags)."""

    repo: Path
    env_templates: tuple[str, ...] = DEFAULT_ENV
    build: str | None = None
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
    cache_dir: str | None = None

    def to_dict(self) -> dict:
        """The stored form (a hunt or compare records it, so ``--resume`` prepares refs the same way)."""
        return {"repo": str(self.repo.resolve()), "env_templates": list(self.env_templates), "build": self.build,
                "build_timeout_s": self.build_timeout_s, "worktree_cache": self.cache_dir}

    @classmethod
    def from_dict(cls, data: dict) -> "RefSetup":
        return cls(repo=Path(data["repo"]), env_templates=tuple(data["env_templates"]), build=data["build"],
                   build_timeout_s=data["build_timeout_s"], cache_dir=data["worktree_cache"])


@dataclass
class PreparedRef:
    name: str
    commit: refs.Commit
    worktree: refs.Worktree
    env: dict[str, str]                 # the variables the templates set (merged over the base env)
    build: refs.BuildResult | None

    @property
    def ok(self) -> bool:
        return self.build is None or self.build.ok

    @property
    def provenance(self) -> dict:
        doc = refs.ref_provenance(self.name, self.commit, self.build, worktree=self.worktree.path)
        doc["env"] = dict(self.env)
        return doc


def safe_dir_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name)[:80] or "ref"


class RefRunner:
    """Prepares refs of one repository and runs planned cases on them."""

    def __init__(self, setup: RefSetup, base: RunOptions, store: Store, *,
                 worktrees: refs.Worktrees | None = None,
                 on_prepare: Callable[["PreparedRef"], None] | None = None, warm_refs: bool = False):
        self.setup = setup
        self.on_prepare = on_prepare                        # e.g. to print each ref's effective env
        self.base = base
        self.store = store
        self.worktrees = worktrees or refs.Worktrees(setup.repo, setup.cache_dir)
        self._engine: tuple[str, Engine] | None = None     # the last ref's warm workers (bisect reruns a commit)
        # warm_refs: every ref's workers kept while a latency compare alternates refs within a round
        # (new_round closes them between rounds)
        self._warm: dict[str, Engine] | None = {} if warm_refs else None

    def close(self) -> None:
        self._drop_engine()
        self.worktrees.close()

    def new_round(self) -> None:
        """Every ref's workers closed: the next run of each starts fresh ones.  A latency compare calls
        it between rounds, because each worker process has a speed of its own that lasts as long as
        it does (docs/latency.md, "Each worker process has its own speed"): kept across rounds, one
        ref's worker a few percent faster than the other's makes identical refs FASTER in every round."""
        self._drop_engine()

    def _drop_engine(self) -> None:
        for engine in (self._warm or {}).values():
            engine.close()
        if self._warm:
            self._warm.clear()
        if self._engine is not None:
            self._engine[1].close()
            self._engine = None

    def _engine_for(self, ref: PreparedRef) -> Engine:
        key = f"{ref.commit.sha}\0{sorted(ref.env.items())}"
        if self._warm is not None:
            if key not in self._warm:
                self._warm[key] = Engine(self.options_for(ref))
            return self._warm[key]
        if self._engine is None or self._engine[0] != key:
            self._drop_engine()
            self._engine = (key, Engine(self.options_for(ref)))
        return self._engine[1]

    def __enter__(self) -> "RefRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def resolve(self, name: str, rev: str) -> refs.Commit:
        return refs.resolve(self.setup.repo, rev, name=name)

    def prepare(self, name: str, commit: refs.Commit) -> PreparedRef:
        worktree = self.worktrees.materialize(commit)
        base_env = dict(self.base.worker.base_env)
        env = refs.expand_env(self.setup.env_templates, worktree=worktree.path, sha=commit.sha, name=name,
                              base_env=base_env)
        build = None
        if self.setup.build:
            log = self.base.worker.log_dir / "builds" / f"{safe_dir_name(name)}-{commit.short}.log"
            build = refs.build(worktree, self.setup.build, log, {**base_env, **env}, self.setup.build_timeout_s)
        prepared = PreparedRef(name, commit, worktree, env, build)
        if self.on_prepare:
            self.on_prepare(prepared)
        return prepared

    def options_for(self, ref: PreparedRef) -> RunOptions:
        worker = replace(self.base.worker, base_env={**self.base.worker.base_env, **ref.env},
                         log_dir=self.base.worker.log_dir / safe_dir_name(f"{ref.name}-{ref.commit.short}"),
                         worktree=str(ref.worktree.path))
        return replace(self.base, worker=worker)

    def run(self, ref: PreparedRef, planned: list[Planned], *, kind: str, parent_id: str | None,
            command: list[str], on_start: Callable | None = None,
            on_result: Callable[[Planned, Result], None] | None = None,
            should_run: Callable[[Planned], bool] | None = None, extra: dict | None = None,
            resumed_from: str | None = None, addendum: Callable[[Recorded], Addendum] | None = None) -> Recorded:
        """One stored run of ``planned`` on ``ref`` (``BUILD_ERROR`` for each case when its build failed);
        ``resumed_from`` and ``addendum`` as for ``harness.run.session.execute``."""
        extra = {**(extra or {}), "ref": ref.provenance}
        if not ref.ok:
            return self._build_failed(ref, planned, kind=kind, parent_id=parent_id, command=command,
                                      on_result=on_result, extra=extra, resumed_from=resumed_from,
                                      addendum=addendum)
        engine = self._engine_for(ref)
        return execute(planned, engine.options, self.store, kind=kind, command=command, parent_id=parent_id,
                       ref=ref.name, ref_sha=ref.commit.sha, extra=extra, on_start=on_start, on_result=on_result,
                       should_run=should_run, engine=engine, resumed_from=resumed_from, addendum=addendum)

    def _build_failed(self, ref: PreparedRef, planned: list[Planned], *, kind: str, parent_id: str | None,
                      command: list[str], on_result, extra: dict, resumed_from: str | None,
                      addendum: Callable[[Recorded], Addendum] | None) -> Recorded:
        build = ref.build
        why = "timed out" if build.timed_out else f"exited {build.returncode}"
        summary = f"build of {ref.name} ({ref.commit.short}) {why}: {self.setup.build} (log {build.log_path})"
        tail = log_tail(build.log_path, lines=80, max_bytes=4000) or ""
        with recording(self.store, planned, self.base, kind=kind, parent_id=parent_id, command=command,
                       ref=ref.name, ref_sha=ref.commit.sha, resumed_from=resumed_from, extra=extra) as recorded:
            try:
                for p in planned:
                    r = Result(outcome=Outcome.BUILD_ERROR, summary=summary, report=tail, ref=ref.name,
                               metrics={"build": ref.provenance["build"]},
                               **case_fields(p.case, p.repeat, self.base.devices[0], None))
                    r = replace(r, log=str(build.log_path))
                    self.store.add_result(recorded.run_id, r)
                    recorded.results.append(r)
                    if on_result:
                        on_result(p, r)
            finally:        # as execute does: the addendum goes into the stored summary
                if addendum:
                    recorded.addendum = addendum(recorded)
        return recorded
