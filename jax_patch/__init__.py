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

"""Spec-exact DLPack import and export for JAX.

``from_dlpack`` here follows the Python Array API standard; ``install()``
makes ``jax.numpy.from_dlpack``, ``jax.dlpack.from_dlpack`` and
``jax.Array.__dlpack__`` use it too. ``aligned_empty``, ``aligned_copy`` and
``aligned_allocation`` make NumPy arrays that jaxlib's CPU client can share.
"""

import importlib
from typing import TYPE_CHECKING, Any

from jax_patch._src.dlpack_errors import (
    CopyRequiredError as CopyRequiredError,
    InvalidDeviceError as InvalidDeviceError,
    MissingDLPackMethodsError as MissingDLPackMethodsError,
    TransformationError as TransformationError,
    UnsupportedDeviceError as UnsupportedDeviceError,
)
from jax_patch._src.install import (
    UntestedJaxWarning as UntestedJaxWarning,
    install as install,
    is_installed as is_installed,
    patched as patched,
    uninstall as uninstall,
)
if TYPE_CHECKING:
  from jax_patch._src.numpy.lax_numpy import from_dlpack as from_dlpack
  from jax_patch._src.numpy_alignment import (
      aligned_allocation as aligned_allocation,
      aligned_copy as aligned_copy,
      aligned_empty as aligned_empty,
  )
else:

  def __getattr__(name: str) -> Any:
    """Imports JAX with the first name that needs it.

    So ``jax-patch stubs``, ``vendor`` and ``series``, which read files,
    start without JAX, its start-up time and what it prints at import (a
    TPU host's warnings, say).
    """
    module = _NEED_JAX.get(name)
    if module is None:
      raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # Found directly from now on.
    return value

  _NEED_JAX = {"from_dlpack": "jax_patch._src.numpy.lax_numpy",
               "aligned_allocation": "jax_patch._src.numpy_alignment",
               "aligned_copy": "jax_patch._src.numpy_alignment",
               "aligned_empty": "jax_patch._src.numpy_alignment"}

__version__ = "0.2.0"
