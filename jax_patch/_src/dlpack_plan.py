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

"""Decides whether a DLPack transfer shares memory, copies it, or raises.

The only place where ``copy`` and ``device`` become what happens: every
import route and the export ask :func:`plan` once, with what they know of
the source, and carry out its answer; :func:`sharing_failed` says what it
comes to where sharing turns out impossible on the way (jaxlib refusing to
alias, or copying what it was asked to alias).
"""

from __future__ import annotations

import enum
from typing import Any

from jax_patch._src import dlpack_device
from jax_patch._src import dlpack_errors


class Decision(enum.Enum):
  """What a transfer does with the source's memory."""
  # Alias it, and raise if that turns out impossible (copy=False).
  SHARE = "share"
  # Alias it where possible, copy it once otherwise (copy=None).
  SHARE_OR_COPY = "share or copy"
  # Copy it once: asked for (copy=True), or sharing is known to be impossible.
  COPY = "copy"


SHARE = Decision.SHARE
SHARE_OR_COPY = Decision.SHARE_OR_COPY
COPY = Decision.COPY

PRODUCER_COPIED = ("the producer could not share the data: it copied it (its "
                   "capsule has IS_COPIED set)")



def plan(copy: bool | None, target: dlpack_device.Target | None = None,
         source: Any = None, obstacle: str | None = None,
         read_only: bool = False, producer_copied: bool = False,
         caller: str = "from_dlpack", specified: str = "input") -> Decision:
  """Decides what a transfer does with the source's memory.

  Args:
    copy: the caller's ``copy``, already checked: a bool or ``None``.
    target: where the result goes; ``None`` keeps the source's device.
    source: the device (or ``jax.Array``) the data lies on now.
    obstacle: why the data cannot be shared as it is, if it cannot: a
      dtype that changes, an alignment or layout jaxlib cannot alias, a
      capsule that cannot be marked read-only.
    read_only: the producer marked its memory read-only.
    producer_copied: the producer already made a copy for this transfer
      (IS_COPIED), which nothing else references.
    caller: the public function whose ``copy`` this is, for messages.
    specified: what asked for the ``obstacle`` (``input``, or the argument
      that did), for messages.

  Returns:
    ``SHARE`` under ``copy=False``; ``COPY`` under ``copy=True`` (unless the
    producer's copy is already independent) and under ``copy=None`` when
    something stands in the way of sharing; ``SHARE_OR_COPY`` otherwise.
    Read-only memory is shared: JAX never writes into an imported buffer.

  Raises:
    CopyRequiredError: ``copy=False``, and the producer copied, there is an
      ``obstacle``, or ``target`` is not the source's device alone.
  """
  if copy is None and obstacle is None and target is None:
    return SHARE_OR_COPY  # The commonest request, decided first.
  if copy is False:
    # The device first, as upstream's messages say it.
    if not dlpack_device.stays(target, source):
      raise dlpack_errors.copy_required(
          f"the source device is {dlpack_device.describe_source(source)}",
          f"device={dlpack_device.describe(target)}", caller)
    if producer_copied:
      raise dlpack_errors.copy_required(PRODUCER_COPIED, caller=caller)
    if obstacle is not None:
      raise dlpack_errors.copy_required(obstacle, specified, caller)
    return SHARE
  if obstacle is not None or (copy and not producer_copied):
    return COPY
  return SHARE_OR_COPY


def sharing_failed(decision: Decision, reason: str,
                   specified: str = "input",
                   caller: str = "from_dlpack") -> Decision:
  """What a plan comes to where sharing turns out impossible, for ``reason``.

  Not a new decision: ``SHARE`` promised to raise then, and the others to
  copy, so ``COPY`` is returned. ``specified`` is what asked for it.

  Raises:
    CopyRequiredError: ``decision`` was ``SHARE``.
  """
  if decision is SHARE:
    raise dlpack_errors.copy_required(reason, specified, caller)
  return COPY
