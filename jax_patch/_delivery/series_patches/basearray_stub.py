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

"""The dlpack-stubs pull request of the series.

Its commit subject is "basearray.pyi: declare __dlpack__'s keywords,
__dlpack_device__".
"""

from __future__ import annotations

from jax_patch._delivery.series_patches import base


BASEARRAY_STUB = "jax/_src/basearray.pyi"

PATCH = base.SeriesPatch(
    slug="dlpack-stubs",
    subject="basearray.pyi: declare __dlpack__'s keywords, __dlpack_device__",
    body="""\
jax.Array's stub declared __dlpack__(self) with no parameters and no
__dlpack_device__, so type checkers rejected the calls the DLPack
protocol makes: x.__dlpack__(stream=None, max_version=(1, 0),
dl_device=(1, 0), copy=False) and x.__dlpack_device__(). They now match
ArrayImpl's runtime signature. The device type stays Any: DLDeviceType
lives in jax._src.typing, which imports this module.

Measured with pyrefly 1.1.1 on JAX's configuration: both calls are
reported as errors.
""",
    claims=(),
    edits=(
        base.Edit(BASEARRAY_STUB, """\
  def __dlpack__(self) -> Any: ...
""", """\
  def __dlpack__(self, *, stream: int | Any | None = None,
                 max_version: tuple[int, int] | None = None,
                 dl_device: tuple[Any, int] | None = None,
                 copy: bool | None = None) -> Any: ...
  def __dlpack_device__(self) -> tuple[Any, int]: ...
"""),
    ),
    typing_probe="""\
import jax
import jax.numpy as jnp

def export(x: jax.Array) -> object:
  device_type, device_id = x.__dlpack_device__()
  del device_type
  return x.__dlpack__(stream=None, max_version=(1, 0),
                      dl_device=(1, device_id), copy=False)

def round_trip(x: jax.Array) -> jax.Array:
  return jnp.from_dlpack(x, device=None, copy=None)
""")


# Its entry in JAX's CHANGELOG.md, under "Unreleased": the section, and
# the item as JAX words them (Sphinx roles included).
CHANGELOG = ("Changes", """\
The type stubs of `jax.Array` declare `__dlpack__`'s `stream`,
`max_version`, `dl_device` and `copy` keywords, and `__dlpack_device__`.""")

FORMS: tuple[base.SeriesPatch, ...] = (PATCH,)
