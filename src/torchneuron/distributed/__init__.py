"""Distributed training on neuron: the "neuron" c10d backend (see process_group)."""
from __future__ import annotations

from .process_group import NeuronProcessGroup, NeuronWork, register  # noqa: F401
