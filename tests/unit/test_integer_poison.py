"""An integer output's poison is chosen away from its golden (harness/worker/launch.py
``integer_poison``): the fixed byte 0xA5 is -91 in an int8, a code a correct quantising kernel
writes, which the check read as "never written" (a false alarm found with the outside pack
tests/outside_packs/rowquant)."""
from __future__ import annotations

import torch

from harness.worker.launch import integer_poison, poison_mask, poisoned


def test_an_int8_golden_holding_the_fixed_pattern_gets_a_poison_two_codes_from_every_value():
    golden = torch.arange(-127, 128, 3, dtype=torch.float32)        # -91 among them, gaps of 3
    assert -91 in golden.tolist()
    value = integer_poison(torch.int8, golden)
    assert value is not None and min(abs(value - g) for g in golden.tolist()) >= 2
    written = golden.to(torch.int8)
    assert not poison_mask(written, value).any()                      # a correct kernel's codes: none poison


def test_the_old_pattern_read_a_correct_code_as_unwritten():
    """The bug itself: -91 written by a kernel matches the fixed pattern."""
    correct = torch.tensor([-91, 3, 127], dtype=torch.int8)
    assert poison_mask(correct).tolist() == [True, False, False]
    value = integer_poison(torch.int8, correct.float())
    assert value is not None and not poison_mask(correct, value).any()


def test_an_element_left_as_found_still_holds_the_chosen_poison():
    golden = torch.tensor([[-91.0, 0.0], [5.0, 126.0]])
    value = integer_poison(torch.int8, golden)
    out = poisoned((2, 2), torch.int8, value)
    out[0] = golden[0].to(torch.int8)                                # the kernel wrote the first row only
    assert poison_mask(out, value).tolist() == [[False, False], [True, True]]


def test_wide_integers_keep_the_fixed_pattern_when_the_golden_is_far_from_it():
    """int32 indices in [0, V): 0xA5A5A5A5 is a large negative number, nowhere near."""
    assert integer_poison(torch.int32, torch.arange(0, 512, dtype=torch.float32)) is None
    assert integer_poison(torch.float32, torch.zeros(3)) is None and integer_poison(torch.bool, torch.zeros(3)) is None
    assert integer_poison(torch.int8, None) is None


def test_a_golden_using_every_int8_value_falls_back_to_the_fixed_pattern():
    assert integer_poison(torch.int8, torch.arange(-128, 128, dtype=torch.float32)) is None
