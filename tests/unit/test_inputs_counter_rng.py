"""Counter-based draws (``harness.worker.counter_rng``) and the inputs digest
(``harness.worker.input_digest``): pure functions of (seed, name, index), independent of
chunking and thread count, with the distributions docs/contracts.md promises."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from harness.case import ATTENTION_SPREADS, PRESETS, Case, SeqLens, SlotMode
from harness.ops import OPS
from harness.worker import counter_rng
from harness.worker.input_digest import GROUP_ROWS, PERIOD, digest_inputs
from harness.worker.inputs import generate

# larger than the base (so draws copy windows) and ends mid-window, so every branch runs
N = 3 * counter_rng.BASE + 3 * counter_rng.WINDOW + 123


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8),
                                                                      b.view(-1).view(torch.uint8))


def test_same_seed_and_name_same_bytes_other_seed_or_name_other_bytes():
    a = counter_rng.draw(3, "k_cache", (N,), "normal", torch.bfloat16)
    assert same_bytes(a, counter_rng.draw(3, "k_cache", (N,), "normal", torch.bfloat16))
    for other in (counter_rng.draw(4, "k_cache", (N,), "normal", torch.bfloat16),
                  counter_rng.draw(3, "v_cache", (N,), "normal", torch.bfloat16)):
        assert (other != a).float().mean() > 0.9


@pytest.mark.parametrize("cuts", [[0, N], [0, 1, N], [0, 77777, 2 * counter_rng.BASE + 5, N - 1, N],
                                  list(range(0, N, 40_000)) + [N]])
def test_drawing_in_segments_gives_the_bytes_of_one_draw(cuts):
    whole = counter_rng.draw(9, "x", (N,), "normal", torch.float32)
    pieces = torch.full((N,), float("nan"))
    for start, end in zip(cuts, cuts[1:]):
        counter_rng.fill(pieces, 9, "x", "normal", [(start, end - start)])
    assert same_bytes(whole, pieces)


def test_copied_windows_and_hashed_elements_give_the_same_bytes(monkeypatch):
    # large draws copy whole windows out of the stream's base, small ones hash their own
    # elements: one function either way, at every alignment of a segment to the windows
    W = counter_rng.WINDOW
    copied = counter_rng.draw(2, "x", (N,), "normal", torch.bfloat16)
    monkeypatch.setattr(counter_rng, "_BASE_LEN", 10 ** 12)      # never worth building the base
    hashed = torch.empty(N, dtype=torch.bfloat16)
    counter_rng.fill(hashed, 2, "x", "normal", [(0, 5), (5, 3 * W - 7), (3 * W - 2, N - 3 * W + 2)])
    assert same_bytes(copied, hashed)
    monkeypatch.setattr(counter_rng, "_BASE_LEN", counter_rng.BASE + W)
    for first, count in ((0, 1), (5, 100), (W - 3, 7), (2 * W + 11, W // 5), (W, 2 * W), (W - 1, 2 * W + 2)):
        out = torch.zeros(N)
        whole = counter_rng.draw(2, "x", (N,), "normal", torch.float32)
        counter_rng.fill(out, 2, "x", "normal", [(first, count), (N - W - 1, W + 1)])  # both paths: base built
        assert torch.equal(out[first:first + count], whole[first:first + count])


def test_a_stream_written_a_piece_at_a_time_gives_the_bytes_of_one_draw():
    """``Stream.write`` (the leaned keys' path): pieces out of order into other buffers, from the
    base and hashed, as one draw."""
    whole = counter_rng.draw(6, "x", (N,), "normal", torch.float32, scale=0.5)
    for elements in (N, 1):                                   # base built; every element hashed
        stream = counter_rng.Stream(6, "x", "normal", torch.float32, "cpu", elements, scale=0.5)
        assert (stream.base is None) == (elements == 1)
        for start, count in ((N - 700, 700), (3, counter_rng.WINDOW + 9), (counter_rng.BASE - 1, 2)):
            out = torch.full((count,), float("nan"))
            stream.write(out, start)
            assert same_bytes(out, whole[start:start + count])


def test_a_stream_refuses_a_buffer_of_another_dtype():
    for elements in (N, 1):
        stream = counter_rng.Stream(6, "x", "normal", torch.float32, "cpu", elements)
        with pytest.raises(TypeError, match="bfloat16"):
            stream.write(torch.empty(10, dtype=torch.bfloat16), 0)


def test_kept_bases_are_the_ones_built_and_only_the_last_few_are_kept():
    counter_rng._kept.clear()
    key = ("normal", torch.bfloat16, torch.device("cpu"), 1.0, 0.0)
    first = counter_rng.Stream(1, "a", "normal", torch.bfloat16, "cpu", N).base
    assert counter_rng.Stream(1, "a", "normal", torch.bfloat16, "cpu", N).base is first          # kept
    assert counter_rng.Stream(1, "a", "normal", torch.float32, "cpu", N).base is not first       # another table
    assert same_bytes(first, counter_rng._base(counter_rng.stream_keys(1, "a"), counter_rng.table(*key)))
    for name in "bcdefg":
        counter_rng.Stream(1, name, "normal", torch.bfloat16, "cpu", N)
    assert len(counter_rng._kept) == counter_rng._KEPT_BASES
    assert counter_rng.Stream(1, "a", "normal", torch.bfloat16, "cpu", N).base is not first      # dropped, rebuilt


def test_windows_start_at_scattered_offsets():
    # the bug this exists for: windows that all start at one offset (a tensor of repeated tiles)
    keys = counter_rng.stream_keys(0, "x")
    offsets = counter_rng._offsets(0, 4096, keys, torch.device("cpu"))
    assert offsets.min() >= 0 and offsets.max() < counter_rng.BASE
    assert offsets.unique().numel() > 4000
    assert counter_rng._offsets(7, 9, keys, torch.device("cpu")).tolist() == offsets[7:9].tolist()


def test_a_segment_leaves_the_rest_alone():
    out = torch.zeros(10_000)
    counter_rng.fill(out, 1, "x", "uniform", [(100, 50)])
    assert out[:100].eq(0).all() and out[150:].eq(0).all() and out[100:150].ne(0).any()
    assert same_bytes(out[100:150], counter_rng.draw(1, "x", (150,), "uniform", torch.float32)[100:])


def test_a_mix_that_ignores_the_counter_is_caught():
    # the bug this test exists for: every element the same (or repeating with the tile)
    x = counter_rng.draw(0, "x", (N,), "normal", torch.float32)
    tile = counter_rng.WINDOW
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
    case = big_case()
    args = generate(case).args
    assert 0.5 <= args["inv_rms"].min() and args["inv_rms"].max() < 1.5
    root = ATTENTION_SPREADS[case.attention] ** 0.5          # q/k norm weights near sqrt(spread)
    for name in ("q_norm_weight", "k_norm_weight"):
        assert (args[name] / root - 1).abs().max() < 0.45 and (args[name] / root).std() < 0.2
    D = case.geometry.head_dim
    heads = args["q_proj"].double().view(-1, case.geometry.num_heads, D)
    pair = [D // 2 - 1, D - 1]
    q = heads[..., [d for d in range(D) if d not in pair]] - 1     # the shared recency component: 1
    sigma = q.numel() ** -0.5                      # of the mean of n N(0, 1) draws
    assert abs(q.mean()) < 4 * sigma and abs(q.std() - 1) < 4 * sigma
    # the shared component: 4 + x/4 on the slowest RoPE pair of every head
    assert (heads[..., pair] - 4).abs().max() < 1.15


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
    saved = cache[12345].clone()
    cache[12345] += 1
    assert digest_inputs(ci.op, ci.args).digest != d
    cache[12345] = saved
    assert digest_inputs(ci.op, ci.args).digest == d
    group = PERIOD * GROUP_ROWS * 8 // cache.element_size()      # elements in a group of rows
    a, b = cache[10].clone(), cache[10 + group].clone()            # same column, other row group
    assert not torch.equal(a, b)
    cache[10], cache[10 + group] = b, a
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


class HostCopies(torch.utils._python_dispatch.TorchDispatchMode):
    """Bytes copied from the host to another device while active."""

    def __init__(self):
        super().__init__()
        self.nbytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in (torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default):
            source = args[1] if func is torch.ops.aten.copy_.default else args[0]
            target = out
            if source.device.type == "cpu" and target.device.type != "cpu" and source.dim() > 0:
                self.nbytes += source.numel() * source.element_size()
        return out


@pytest.mark.parametrize("op", list(OPS))
def test_inputs_are_drawn_on_the_device_not_copied_from_the_host(op, monkeypatch):
    # the meta device stands in for an accelerator: only the small host-defined tables
    # (indices, RoPE cos/sin in float64 then rounded) may cross, never the draws
    # and the 65536-entry value tables, once per process
    case = replace(big_case(), op=op, chunk_size=8 if op == "prefill_attention" else None)
    monkeypatch.setattr(counter_rng, "_device_tables", {})
    with HostCopies() as copies:
        ci = generate(case, "meta")
    tensors = {name: t for name, t in ci.args.items() if isinstance(t, torch.Tensor)}
    assert {t.device.type for t in tensors.values()} == {"meta"}
    host_defined = sum(t.numel() * t.element_size() for name, t in tensors.items()
                       if name.startswith("rope_") or t.dtype == torch.int32)
    if op == "paged_decode_attention":   # the RoPE tables its query's recency component is built from
        host_defined += 2 * case.max_pos * case.geometry.head_dim * 4
    tables = sum(t.numel() * t.element_size() for t in counter_rng._device_tables.values())
    assert copies.nbytes == host_defined + tables
    assert all(t.numel() == 1 << 16 for t in counter_rng._device_tables.values())
    assert ci.slots.device.type == "cpu"                  # metadata the checks index with stays on the host
