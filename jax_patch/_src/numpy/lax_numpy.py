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

"""``jax.numpy.from_dlpack``, spelled as the Array API standard spells it.

It is :func:`jax_patch._src.dlpack.array_api_from_dlpack` itself, not a
wrapper: every import comes through here, and a call layer would cost a
twentieth of a small import. Its code is named ``from_dlpack``, so argument
errors and tracebacks say what users call; type checkers read the
declaration below, which ``tests/signature_test.py`` keeps in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
  from typing import Any

  from jax._src.typing import Array

  from jax_patch._src.dlpack_device import Target

  def from_dlpack(x: Any, /, *, device: Target | None = None,
                  copy: bool | None = None) -> Array:
    """The Array API standard's ``from_dlpack``: see ``array_api_from_dlpack``.
    """
    ...
else:
  from jax_patch._src.dlpack import array_api_from_dlpack as from_dlpack

__all__ = ["from_dlpack"]
