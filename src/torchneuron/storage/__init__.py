"""Device memory: the cell behind each storage, views over it, host transfer.

- ``cells``: fake addresses, the ``Cell`` (one flat jax array per storage),
  per-device accounting, and the tensors over cells;
- ``views``: how a (dtype, shape, strides, offset) view reads and writes its cell,
  traced inside executables;
- ``transfer``: host <-> device copies, a tensor's values as a jax array, the cached
  device scalars for Python numbers;
- ``lazy``: fused eager, the pending program per device whose results cells hold
  until a value is needed.
"""
from __future__ import annotations

from .cells import (CPU_KEYS, Cell, cell_at, cell_of, check_room, contiguous_strides,  # noqa: F401
                    empty, empty_shell, fmt_bytes, from_array, index_dtype, live_cells,
                    make_tensor, size_class,
                    new_shell, new_storage, parse_bytes, raw_storage, retype, set_metadata,
                    resize_storage, stats, storage_numel, torch_device, zeros_flat,
                    Pending, PendingCell, put, raw_arr, translate_runtime_error)
from . import lazy  # noqa: F401
from .transfer import (cells_of, device_fn, dyn_scalar, host_storage_to_device,  # noqa: F401
                       number_key,
                       adopt_host, dense_copy, host_alias, materialize, read_back, to_cpu_tensor,
                       to_device_array, to_host,
                       to_neuron, typed_scalar, view_values, whole_cell)
from .views import (apply_flags, canonical_spec, perm_plan, read_view, reinterpret, view_flags,  # noqa: F401
                    view_spec, write_view, write_view_overlapping)
