"""An outside library's golden package: its own spec classes (not the harness's)."""
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import torch


@dataclass
class TensorSpec:
    name: str
    shape: list
    dtype: torch.dtype
    init_value: Optional[Union[int, float, torch.Tensor, Callable]] = None
    is_output: bool = False


@dataclass
class ScalarSpec:
    name: str
    dtype: str
    value: Any
