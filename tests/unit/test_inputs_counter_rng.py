"""Counter-based draws (``harness.worker.counter_rng``) and the inputs digest
(``harness.worker.input_digest``): pure functions of (seed, name, index), independent of
chunking and thread count, with the distributions docs/contracts.md promises."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from harness.case import PRESETS, Case, SeqLens, SlotMode
from harness.ops import OPS
from harness.worker import counter_rng
from harness.worker.input_digest import digest_inputs
from harness.worker.inputs import generate

# spans two round-key blocks and ends mid-tile, so every layout branch runs
N = 2 * counter_rng.BLOCK_WORDS * 2 + 3 * counter_rng.TILE_WORDS + 123


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8),
                                                                      b.view(-1).view(torch.uint8))


def test_same_seed_and_name_same_bytes_other_seed_or_name_other_bytes():
    a = counter_rng.draw(3, "k_cache", (N,), "normal", torch.bfloat16)
    assert same_bytes(a, counter_rng.draw(3, "k_cache", (N,), "normal", torch.bfloat16))
    for other in (counter_rng.draw(4, "k_cache", (N,), "normal", torch.bfloat16),
                  counter_rng.draw(3, "v_cache", (N,), "normal", torch.bfloat16)):
        assert (other != a).float().mean() > 0.9


@pytest.mark.parametrize("cuts", [[0, N], [0, 1, N], [0, 77777, 2 * counter_rng.BLOCK_WORDS + 5, N - 1, N],
                                  list(range(0, N, 40_000)) + [N]])
def test_drawing_in_segments_gives_the_bytes_of_one_draw(cuts):
    whole = counter_rng.draw(9, "x", (N,), "normal", torch.float32)
    pieces = torch.full((N,), float("nan"))
    for start, end in zip(cuts, cuts[1:]):
        counter_rng.fill(pieces, 9, "x", "normal", [(start, end - start)])
    assert same_bytes(whole, pieces)


def test_the_accelerator_grouping_gives_the_cpu_bytes(monkeypatch):
    # on a GPU or NPU the words of a whole block are hashed per group of ops; same function
    cpu = counter_rng.draw(2, "x", (N,), "normal", torch.bfloat16)
    monkeypatch.setattr(counter_rng, "tiles_per_run", lambda device: counter_rng.BLOCK_WORDS // counter_rng.TILE_WORDS)
    grouped = torch.empty(N, dtype=torch.bfloat16)
    counter_rng.fill(grouped, 2, "x", "normal", [(0, 5), (5, N - 5)])
    assert same_bytes(cpu, grouped)


def test_a_segment_leaves_the_rest_alone():
    out = torch.zeros(10_000)
    counter_rng.fill(out, 1, "x", "uniform", [(100, 50)])
    assert out[:100].eq(0).all() and out[150:].eq(0).all() and out[100:150].ne(0).any()
    assert same_bytes(out[100:150], counter_rng.draw(1, "x", (150,), "uniform", torch.float32)[100:])


def test_a_mix_that_ignores_the_counter_is_caught():
    # the bug this test exists for: every element the same (or repeating with the tile)
    x = counter_rng.draw(0, "x", (N,), "normal", torch.float32)
    tile = 2 * counter_rng.TILE_WORDS
    assert not torch.equal(x[:tile], x[tile:2 * tile])
    assert x.unique().numel() > 60_000


def test_normal_draws_look_standard_normal():
    x = counter_rng.draw(5, "n", (N,), "normal", torch.float32).double()
    assert abs(x.mean()) < 0.005 and abs(x.std() - 1) < 0.005
    assert 4.0 < x.abs().max() < 4.5
    assert abs((x.abs() < 1).double().mean() - 0.6827) < 0.005
    lag = (x[1:] * x[:-1]).mean()                       # neighbours uncorrelated
    assert abs(lag) < 0.005


def test_uniform_draws_cover_zero_to_one_evenly():
    u = counter_rng.draw(5, "u", (N,), "uniform", torch.float32)
    assert u.min() >= 0 and u.max() < 1
    counts = torch.histc(u, bins=16, min=0, max=1)
    assert (counts / u.numel() - 1 / 16).abs().max() < 0.002


def big_case(seed: int = 0) -> Case:
    geo = replace(PRESETS["tiny"], num_kv_heads=4, head_dim=64, page_size=64)
    return Case(case_id="c", matrix="m", source="m.yaml:1", op="fused_rope_decode_attention", kernel="reference",
                geometry=geo, seq_lens=SeqLens("const", (1000,)), slot_mode=SlotMode("random"), seed=seed)


def test_inputs_keep_their_documented_ranges():
    args = generate(big_case()).args
    assert 0.5 <= args["inv_rms"].min() and args["inv_rms"].max() < 1.5
    for name in ("q_norm_weight", "k_norm_weight"):
        assert (args[name] - 1).abs().max() < 0.45 and args[name].std() < 0.2
    q = args["q_proj"].double()
    assert abs(q.mean()) < 0.05 and abs(q.std() - 1) < 0.05


def test_layers_weights_are_fan_in_scaled():
    case = replace(big_case(), op="decode_layers", seq_lens=SeqLens("const", (40,)))
    args = generate(case).args
    H = case.geometry.hidden
    assert abs(args["wq"].double().std() * H ** 0.5 - 1) < 0.05
    assert abs(args["lm_head"].double().std() * H ** 0.5 - 1) < 0.05


def test_digest_is_the_same_for_the_same_inputs_and_differs_across_seeds():
    case = big_case()
    first, again = generate(case), generate(case)
    d = digest_inputs(first.op, first.args)
    assert d == digest_inputs(again.op, again.args)
    assert d.nbytes == sum(t.numel() * t.element_size() for t in first.args.values() if isinstance(t, torch.Tensor))
    assert len(d.digest) == 8
    other = generate(case.with_seed(1))
    assert digest_inputs(other.op, other.args).digest != d.digest


def test_digest_sees_one_changed_element_and_two_swapped_ones():
    ci = generate(big_case())
    d = digest_inputs(ci.op, ci.args).digest
    cache = ci.args["k_cache"].view(-1)
    cache[12345] += 1
    assert digest_inputs(ci.op, ci.args).digest != d
    cache[12345] -= 1
    assert digest_inputs(ci.op, ci.args).digest == d
    a, b = cache[10].clone(), cache[10 + 4093 * 2 * 64].clone()   # same column, other row group
    assert not torch.equal(a, b)
    cache[10], cache[10 + 4093 * 2 * 64] = b, a
    assert digest_inputs(ci.op, ci.args).digest != d


_DIGEST_SCRIPT = """
import sys, torch
torch.set_num_threads(int(sys.argv[1]))
sys.path.insert(0, sys.argv[2])
from test_inputs_counter_rng import big_case
from harness.worker.inputs import generate
from harness.worker.input_digest import digest_inputs
ci = generate(big_case())
print(digest_inputs(ci.op, ci.args).digest)
"""


def test_digest_is_the_same_with_one_and_two_cpu_threads():
    here = str(__import__("pathlib").Path(__file__).parent)
    digests = {subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT, str(n), here], capture_output=True,
                              text=True, check=True, timeout=300).stdout.strip() for n in (1, 2)}
    assert len(digests) == 1 and len(next(iter(digests))) == 8


@pytest.mark.parametrize("op", list(OPS))
def test_every_op_reports_its_inputs_digest(op):
    case = replace(big_case(), op=op, seq_lens=SeqLens("const", (40,)),
                   chunk_size=8 if op == "prefill_attention" else None)
    ci = generate(case)
    assert digest_inputs(ci.op, ci.args).nbytes > 0


def test_a_small_tensor_hashed_alone_gets_the_bytes_of_whole_tiles():
    """Small tensors hash only their own elements (a tiny case paid for whole 64 Ki-element tiles):
    the indices must be those whole tiles give, on a CPU run of one tile and a device run of four."""
    keys = counter_rng._round_keys(counter_rng.stream_key(3, "y"), 0)
    tile = counter_rng._TILE_ELEMS
    for tiles in (1, 4):
        whole = counter_rng._hash_tiles(counter_rng._workspace(tiles, torch.device("cpu")), 8, keys)
        alone = counter_rng._hash_elements(torch.arange(tiles * tile), 8, keys)
        assert torch.equal(alone, whole[:tiles * tile])
    big = counter_rng.draw(7, "x", (3 * tile,), "normal", torch.float32)
    for first, count in ((0, 1), (5, 100), (tile - 3, 7), (2 * tile + 11, tile // 5)):
        out = torch.zeros(3 * tile)
        counter_rng.fill(out, 7, "x", "normal", [(first, count)])
        assert torch.equal(out[first:first + count], big[first:first + count])
