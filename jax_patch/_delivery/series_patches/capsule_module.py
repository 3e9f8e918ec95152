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

"""``jax/_src/dlpack_capsule.py``, the module the series adds to JAX, as
each pull request that touches it leaves it.

The module as the whole series leaves it is a file of this repository
(``series_files/dlpack_capsule.py``), which the project's type checkers and
tests read; what each pull request adds to it is cut from that file.
"""

from __future__ import annotations

import pathlib

from jax_patch._delivery.series_patches import base


CAPSULE_MODULE = "jax/_src/dlpack_capsule.py"

_AFTER_SERIES = (
    pathlib.Path(__file__).parents[1] / "series_files" / "dlpack_capsule.py"
).read_text()


def _function(source: str, name: str) -> str:
  """The text of ``source``'s top-level function ``name``."""
  start = source.index(f"\ndef {name}(") + 1
  end = source.find("\n\n\n", start)
  return source[start:] if end == -1 else source[start:end + 1]


def _before(source: str, edits: tuple[base.Edit, ...]) -> str:
  """``source`` as it was before ``edits`` (applied in order) made it."""
  for edit in reversed(edits):
    if source.count(edit.new) != 1:
      raise ValueError(f"{edit.path} holds {source.count(edit.new)} copies "
                       f"of an edit's text, not one:\n{edit.new}")
    source = source.replace(edit.new, edit.old)
  return source


# What the versioned-export patch adds to it.
EXPORT_EDITS = (
    base.Edit(CAPSULE_MODULE, """\
jaxlib before 0.12 imports only DLPack 0.x capsules ("dltensor"). Only
DLPack 1.x capsules ("dltensor_versioned") can say READ_ONLY, and NumPy
exports a read-only array only as one. This module hands jaxlib a 1.x
capsule's tensor without copying it: a new managed tensor of the other
""", """\
jaxlib before 0.12 imports and exports only DLPack 0.x capsules
("dltensor"). Only DLPack 1.x capsules ("dltensor_versioned") can say
READ_ONLY, and NumPy exports a read-only array only as one. This module
converts between the two without copying the tensor: a new managed tensor
of the other
"""),
    base.Edit(CAPSULE_MODULE, """\
import numpy as np


""", """\
import numpy as np

FLAG_READ_ONLY = 1 << 0
FLAG_IS_COPIED = 1 << 1


"""),
    base.Edit(CAPSULE_MODULE, """\
  return _new_capsule(_DLManagedTensor(dl_tensor=versioned.dl_tensor), owner)
""", """\
  return _new_capsule(_DLManagedTensor(dl_tensor=versioned.dl_tensor), owner)


""" + _function(_AFTER_SERIES, "as_versioned_capsule")),
)

# What the producer-copied patch adds to it.
VERSIONED_FLAGS_EDIT = base.Edit(CAPSULE_MODULE, """\
                                dl_tensor=legacy.dl_tensor), capsule)
""", """\
                                dl_tensor=legacy.dl_tensor), capsule)


""" + _function(_AFTER_SERIES, "versioned_flags"))

# jax/_src/dlpack_capsule.py, as the versioned-import patch adds it.
AS_VERSIONED_IMPORT_ADDS_IT = _before(_AFTER_SERIES,
                                      EXPORT_EDITS + (VERSIONED_FLAGS_EDIT,))
