"""Mutant kernels: the reference with one real-world bug injected, so the harness can prove it catches it.

Each module reproduces one bug class seen in fused kernels (docs/contracts.md) and
exposes a function per op it supports, named as the op (the builtin registry
in ``harness/ops/registry.py`` lists which).  Mutants reuse ``harness.kernels.reference``
and change one step, so everything but the bug is the reference's behaviour:

- ``unguarded_slot_write``: cache rows written for ``slot < 0`` via raw offsets (out of bounds; 507018).
- ``returns_query``: the fused op returns the rotated query, ``out`` never written (wrong buffer).
- ``skip_rope``: no RoPE on q and k.
- ``stale_kv``: attention reads the current token from the cache before its write lands.
- ``racy_head``: now and then one head (or logits row) is torn, as without a pipeline barrier.
- ``hang``: never returns (a cross-core deadlock).
- ``segfault``: kills the process with SIGSEGV.
- ``native_hang``: blocks in native code with SIGTERM ignored (only SIGKILL ends it).
- ``abort``: ``abort()`` as a failed native assertion does (SIGABRT).
- ``oom``: allocates until a bounded address-space limit stops it.
- ``npu_fault``: an emulation of torch-npu's report of an AICore fault and 507018.

For ``harness audit`` (docs/audit.md), not builtins of their own:

- ``operators``: the mutation operators that wrap any kernel, chosen through the case env.
- ``off_by_one_page``: attention reads one sequence's last cached page from the next page.
- ``key_bounds``: attention reads one key too few or too many, its last page whole past the
  length, or one block past the last (through a ``-1`` entry).
- ``gptj_rope``: GPT-J interleaved RoPE instead of NeoX rotate-half (the ``gptj_rope`` operator).
"""
