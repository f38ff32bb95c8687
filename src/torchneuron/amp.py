"""torch.autocast("neuron"): lower-precision and fp32 op lists like CUDA's."""
from __future__ import annotations


def register() -> None:
    return None
