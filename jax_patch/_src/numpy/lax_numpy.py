# Copyright 2026 The jax-patch Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     https://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""``jax.numpy.from_dlpack``, spelled as the Array API standard spells it."""

from __future__ import annotations

from typing import Any

from jax._src.typing import Array
from jax_patch._src import dlpack
from jax_patch._src import dlpack_device


def from_dlpack(x: Any, /, *, device: dlpack_device.Target | None = None,
                copy: bool | None = None) -> Array:
  """Constructs a JAX array from an object that implements DLPack.

  The Array API standard's ``from_dlpack``: ``device`` and ``copy`` are
  keyword-only. See :func:`jax_patch._src.dlpack.from_dlpack` for what is
  shared, what is copied and what raises.

  Args:
    x: an object with ``__dlpack__`` and ``__dlpack_device__`` methods.
    device: ``None`` (the producer's device), a ``jax.Device`` or a
      ``jax.sharding.Sharding``.
    copy: ``True`` (always copy), ``False`` (never copy; raise
      ``CopyRequiredError`` instead) or ``None`` (copy only if needed).

  Returns:
    A ``jax.Array``.
  """
  return dlpack.from_dlpack(x, device, copy)
