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

"""The first step of every transfer: its arguments, checked and normalised.

:func:`of` turns ``from_dlpack``'s ``device`` (a device, a sharding, or a
``Format`` of layout and sharding) into what the plan and placement read:
``target`` (a device or sharding; ``None`` to stay) and ``layout`` (``None``
for any); ``copy`` into a bool or ``None``. Arguments that cannot make a
transfer raise here, before the producer is asked; so, from the caller, does
a call inside a JAX transformation (:func:`transformation_error`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_device
from jax_patch._src import dlpack_errors


def of(device: object, copy: object
       ) -> tuple[dlpack_device.Target | None, Any, bool | None]:
  """Checks ``from_dlpack``'s arguments; returns ``(target, layout, copy)``.

  A ``Format``'s sharding is the target and its layout the layout; either
  may be ``None``. Any other ``device`` is the target, with no layout.

  Raises:
    TypeError: ``copy`` is not a bool or ``None``.
    InvalidDeviceError: (a ``TypeError`` and ``ValueError``) ``device`` is
      not a device, sharding or ``Format``.
    ValueError: the ``Format``'s layout is ``Layout.AUTO``.
  """
  checked_copy = check_copy(copy)
  target = None if device is None else dlpack_device.check_target(device)
  if isinstance(target, dlpack_compat.FORMAT_TYPE):
    layout, sharding = dlpack_device.format_parts(target)
    return sharding, layout, checked_copy
  return target, None, checked_copy


def check_copy(copy: object, caller: str = "from_dlpack") -> bool | None:
  """Returns ``copy`` as a bool or ``None``; NumPy bools are bools.

  Raises:
    TypeError: ``copy`` is anything else, naming ``caller``.
  """
  if copy is None or isinstance(copy, bool):
    return copy
  if isinstance(copy, np.bool_):
    return bool(copy)
  raise TypeError(
      f"{caller}: copy must be True, False or None, got {copy!r} of type "
      f"{type(copy).__name__}.")


def transformation_error() -> dlpack_errors.TransformationError:
  return dlpack_errors.TransformationError(
      "from_dlpack cannot be called inside a JAX transformation (jit, vmap, "
      "grad, scan, ...): it reads an external buffer that tracing cannot "
      "follow, so the traced function would bake in the buffer's current "
      "contents. Call from_dlpack outside the transformation and pass the "
      "result in as an argument.")
