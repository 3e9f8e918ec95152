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

"""Exception classes of the DLPack import and export, and their messages.

Where the Array API standard and upstream JAX disagree on an exception type,
the class derives from both, so code written against either keeps working.
Where upstream raised too, the message opens in upstream's wording (tests
pin each pattern), then says why and what to pass.
"""

from __future__ import annotations


class CopyRequiredError(BufferError, ValueError):
  """A copy is needed but the caller passed ``copy=False``.

  The standard's copy text asks for ``BufferError``; upstream ``ValueError``.
  """


class InvalidDeviceError(TypeError, ValueError):
  """``device`` is not a ``jax.Device`` or ``jax.sharding.Sharding``.

  A wrong type is a ``TypeError``; upstream JAX raised ``ValueError``.
  """


class MissingDLPackMethodsError(AttributeError, TypeError):
  """The object lacks ``__dlpack__`` or ``__dlpack_device__``.

  The standard asks for ``AttributeError``; upstream JAX raised ``TypeError``.
  """


class UnsupportedDeviceError(BufferError, TypeError):
  """The array lives on a device type this JAX cannot import from.

  The standard recommends ``BufferError``; upstream JAX raised ``TypeError``.
  """


class TransformationError(RuntimeError):
  """``from_dlpack`` was called inside a JAX transformation.

  Tracing would bake in the external, mutable buffer's current contents.
  """


def copy_required(reason: str, specified: str = "input",
                  caller: str = "from_dlpack") -> CopyRequiredError:
  """The error for ``copy=False`` when a copy is needed.

  Args:
    reason: why a copy is needed, as a clause ("the source device is ...").
    specified: what needs it: ``input`` (unshareable input) or ``device=...``.
    caller: the function whose ``copy=False`` it is.

  Returns:
    A ``CopyRequiredError`` opening as upstream's does ("Specified ... which
    requires a copy since ...").
  """
  return CopyRequiredError(
      f"Specified {specified} which requires a copy since {reason}, however "
      f"copy=False. {caller} never copies under copy=False (the Array API "
      "standard's rule); pass copy=None to copy only when needed, or "
      "copy=True.")
