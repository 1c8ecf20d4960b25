"""Kernel-library refs: a fix is tested by keeping the harness, goldens and cases fixed and
switching only the kernel library's checkout.

``spec`` parses ``--ref NAME=REV``; ``git`` resolves revisions and lists ranges;
``worktrees`` checks commits out as cached detached worktrees; ``envs`` expands
``--env`` templates against one; ``builds`` runs ``--build`` there at most once per
command.  The names callers need are here; ``runner`` and ``compare`` build on them, and
``latency_bisect`` (``bisect --slower-than``) on ``compare``.
"""
from harness.refs.builds import BuildResult, build, ref_provenance
from harness.refs.envs import TEMPLATE_FIELDS, expand_env, with_defaults
from harness.refs.git import Commit, commits_between, is_ancestor, resolve
from harness.refs.spec import RefError, parse_ref_arg, parse_ref_args
from harness.refs.worktrees import CACHE_ENV, Worktree, Worktrees

__all__ = [
    "CACHE_ENV", "TEMPLATE_FIELDS", "BuildResult", "Commit", "RefError", "Worktree", "Worktrees", "build",
    "commits_between", "expand_env", "is_ancestor", "parse_ref_arg", "parse_ref_args", "ref_provenance", "resolve",
    "with_defaults",
]
