"""The core knows no op by name (issue 36): every op comes from a pack, so nothing under harness/
outside a pack names the Qwen3 ops or their cache layout.  A word found here means a pack's
knowledge leaked back into the core, where a sixth op would have to edit it."""
from __future__ import annotations

import re
from pathlib import Path

from harness.packs import BUILTIN_PACKS

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "harness"
WORDS = ("rope_kv_write", "paged_decode_attention", "fused_rope_decode_attention", "prefill_attention",
         "decode_layers", "k_cache", "v_cache", "block_table", "slot_mapping")
_PATTERN = re.compile(r"\b(" + "|".join(WORDS) + r")\b")
# Files still to move into the pack (the list only shrinks).
PENDING: set[str] = set()


def _pack_dirs() -> list[Path]:
    return [ROOT / Path(*name.split(".")) for name in BUILTIN_PACKS]


def core_files() -> list[Path]:
    packs = _pack_dirs()
    return sorted(p for p in CORE.rglob("*") if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts
                  and not any(p.is_relative_to(d) for d in packs))


def test_the_core_names_no_op_of_a_pack_and_none_of_its_buffers():
    found = []
    for path in core_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel in PENDING:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _PATTERN.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_grep_finds_what_it_looks_for():
    """The pattern matches each word as code writes it, and not a longer name that contains one."""
    for word in WORDS:
        assert _PATTERN.search(f"x = args[{word!r}]") and _PATTERN.search(f"# {word}: the op")
    assert not _PATTERN.search("my_k_cache_size = 1") and not _PATTERN.search("decode_layers2")


def test_the_packs_are_where_the_words_are():
    """The check is not vacuous: the words live in the Qwen3 pack, which the walk leaves out."""
    qwen3 = ROOT / "harness" / "packs" / "qwen3"
    assert qwen3 in _pack_dirs()
    assert any(_PATTERN.search(p.read_text()) for p in qwen3.glob("*.py"))
    assert all(not p.is_relative_to(qwen3) for p in core_files())
    assert (CORE / "worker" / "execute.py") in core_files()
