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

"""Devices for DLPack imports: checks, the producer's device, and placement.

The only module that maps DLPack device types onto JAX platforms.
"""

from __future__ import annotations

from typing import Any, Union

from jax._src import xla_bridge
from jax._src.api import device_put
from jax._src.lib import xla_client
from jax._src.sharding import Sharding
from jax._src.sharding_impls import SingleDeviceSharding
from jax._src.typing import Array, DLDeviceType

from jax_patch._src import dlpack_capsule
from jax_patch._src import dlpack_compat
from jax_patch._src import dlpack_errors

Device = Any
# Where from_dlpack places its result; a Format is split first (format_parts).
Target = Union[Device, Sharding]
Format = Any  # jax._src.layout.Format, or Layout before JAX 0.6.

# dlpack.h's device types; upstream's DLDeviceType has some (kDLCUDAHost: 0.10).
KDL_CPU = dlpack_capsule.KDL_CPU
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_ROCM = 10
KDL_ROCM_HOST = 11
KDL_CUDA_MANAGED = 13
KDL_ONEAPI = 14
KDL_TPU_HOST = 20

DL_DEVICE_TO_PLATFORM: dict[int, str] = {
    KDL_CPU: "cpu",
    KDL_CUDA: "cuda",
    KDL_CUDA_HOST: "cuda",
    KDL_ROCM: "rocm",
    KDL_ROCM_HOST: "rocm",
    KDL_ONEAPI: "oneapi",
    KDL_TPU_HOST: "tpu",
}

# Memory the host can read but no JAX device holds as is, named for messages:
# jaxlib's import does not know CUDA managed memory (refused before 0.10.2,
# later taken for device memory, untested), so a CPU target gets a host export
# from the producer, as for a platform without a backend; else BufferError.
HOST_EXPORT_ONLY: dict[int, str] = {KDL_CUDA_MANAGED: "CUDA managed memory"}

# Host memory, plain or pinned by an accelerator: no stream orders it.
HOST_DEVICE_TYPES = frozenset({KDL_CPU, KDL_CUDA_HOST, KDL_ROCM_HOST,
                               KDL_TPU_HOST})

HOST_DL_DEVICE = (KDL_CPU, 0)


def check_target(device: object) -> Target | Format | None:
  """Returns ``device`` if it is a valid ``from_dlpack`` target.

  Raises:
    InvalidDeviceError: (a ``TypeError`` and ``ValueError``) ``device`` is
      not ``None``, a ``jax.Device``, a ``Sharding`` or a ``Format``.
  """
  if device is None or isinstance(
      device, (xla_client.Device, Sharding, dlpack_compat.FORMAT_TYPE)):
    return device
  hint = ""
  if isinstance(device, str):
    hint = (f" To name a device by platform, pass "
            f"jax.devices({device!r})[0].")
  raise dlpack_errors.InvalidDeviceError(
      "from_dlpack: device must be None, a jax.Device, a "
      f"jax.sharding.Sharding or a {dlpack_compat.FORMAT_NAME}, got "
      f"{device!r} of type {type(device).__name__}.{hint}")


def format_parts(target_format: Format) -> tuple[Any, Target | None]:
  """A ``Format`` target's device-local layout and sharding.

  A ``None`` layout asks for none; a ``None`` sharding keeps the source device.

  Raises:
    ValueError: the layout is ``Layout.AUTO``, which only ``jit`` resolves.
  """
  layout, sharding = dlpack_compat.format_parts(target_format)
  if dlpack_compat.is_auto_layout(layout):
    raise ValueError(
        "from_dlpack: Layout.AUTO cannot be used in place of a device-local "
        "layout: only jit chooses it. Pass a concrete Layout, or None, in "
        f"device={target_format!r}.")
  return layout, sharding


def moves(result: Any, target: Target | None) -> bool:
  """Whether placing ``result`` on ``target`` takes it to other devices."""
  return target is not None and devices_of(target) != set(
      result.sharding.device_set)


def placement_obstacle(result: Any, target: Target | None,
                       layout: Any) -> str | None:
  """Why an import does not lie as asked; ``None`` where it does.

  ``result`` is the import (source device, default memory kind, strides'
  layout); ``target`` and ``layout`` are the request, each may be ``None``.

  Raises:
    ValueError: JAX before 0.5.1 holds CPU arrays in their default layout only.
  """
  if target is not None and not holds(result, target):
    if moves(result, target):
      return f"the source device is {describe_source(result)}"
    return (f"the data lies in memory kind {result.sharding.memory_kind} of "
            f"{describe(result.sharding)}")
  if layout is None:
    return None
  actual = dlpack_compat.layout_of(result)
  if dlpack_compat.layout_matches(layout, actual):
    return None
  if not dlpack_compat.JAX_HOLDS_CPU_LAYOUTS and is_host(result.sharding):
    raise ValueError(
        f"from_dlpack: this JAX cannot hold a CPU array in layout {layout}: "
        "before JAX 0.5.1, XLA's CPU arrays keep their default layout "
        f"({actual} here). Pass a Format without a layout.")
  return f"the data lies in layout {actual}"


def dlpack_device_of(external_array: Any) -> tuple[int, int]:
  """Returns the ``(device_type, device_id)`` its ``__dlpack_device__`` says.

  Raises:
    UnsupportedDeviceError: the answer is not a pair of integers.
  """
  value = external_array.__dlpack_device__()
  try:
    device_type, device_id = value
    return int(device_type), int(device_id)
  except (TypeError, ValueError):
    raise dlpack_errors.UnsupportedDeviceError(
        "from_dlpack: __dlpack_device__ returned "
        f"{value!r}, not a (device_type, device_id) pair.") from None


def platform_of(dl_device: tuple[int, int], exporting: bool = False) -> str:
  """Returns the JAX platform name for a DLPack device.

  Args:
    exporting: asked for on export (``dl_device=``); only the message differs.

  Raises:
    UnsupportedDeviceError: JAX has no platform for this device type.
  """
  platform = (DL_DEVICE_TO_PLATFORM.get(dl_device[0])
              or HOST_EXPORT_ONLY.get(dl_device[0]))
  if platform is None:
    # The opening sentences are upstream's: code matches on them.
    opening = ("The device specification passed to to_dlpack contains an "
               if exporting else
               "Array passed to from_dlpack is on ")
    raise dlpack_errors.UnsupportedDeviceError(
        f"{opening}unsupported device type (DLDeviceType: {dl_device[0]}). "
        "JAX knows DLDeviceTypes "
        f"{sorted({**DL_DEVICE_TO_PLATFORM, **HOST_EXPORT_ONLY})}.")
  return platform


# DLPack device -> JAX device, for the backends dict it was computed from.
_device_cache: dict[tuple[int, int], Device | None] = {}
_device_cache_backends: list[Any] = [None]


def jax_device_for(dl_device: tuple[int, int],
                   exporting: bool = False) -> Device | None:
  """Returns the JAX device holding ``dl_device``'s memory.

  Args:
    exporting: see :func:`platform_of`.

  Returns:
    The device, or ``None`` where JAX has no backend for its platform or no
    device holds such memory as is (``HOST_EXPORT_ONLY``).

  Raises:
    UnsupportedDeviceError: the device type or id is unknown to JAX.
  """
  backends = dlpack_compat.backends()
  if backends is not _device_cache_backends[0]:
    _device_cache.clear()
    _device_cache_backends[0] = backends
  try:
    return _device_cache[dl_device]
  except KeyError:
    device = _device_cache[dl_device] = _look_up_device(dl_device, backends,
                                                        exporting)
    return device


def host_device() -> Device | None:
  """``jax_device_for(HOST_DL_DEVICE)`` in one step: every NumPy import asks."""
  # jax_device_for's cache, read without its calls while JAX keeps the
  # backends dict (dlpack_compat.backends) that the cache was filled from.
  backends = xla_bridge._backends  # pylint: disable=protected-access
  if backends is _device_cache_backends[0]:
    try:
      return _device_cache[HOST_DL_DEVICE]
    except KeyError:
      pass
  return jax_device_for(HOST_DL_DEVICE)


def _look_up_device(dl_device: tuple[int, int], backends: dict[str, Any],
                    exporting: bool) -> Device | None:
  backend = backends.get(platform_of(dl_device, exporting))
  if backend is None or dl_device[0] in HOST_EXPORT_ONLY:
    return None
  try:
    return backend.device_from_local_hardware_id(dl_device[1])
  except Exception as err:  # jaxlib raises its own runtime error type.
    raise dlpack_errors.UnsupportedDeviceError(
        f"from_dlpack: JAX has no {backend.platform} device with local "
        f"hardware id {dl_device[1]}: {err}") from None


def devices_of(target: Target) -> set[Device]:
  if isinstance(target, Sharding):
    return set(target.device_set)
  return {target}


def is_only(target: Target | None, device: Device) -> bool:
  """Whether placing on ``target`` means staying on ``device`` alone."""
  return target is None or devices_of(target) == {device}


def stays(target: Target | None, source: Any) -> bool:
  """Whether placing on ``target`` leaves the data where ``source`` holds it.

  ``source``: a device, or a ``jax.Array`` whose sharding must be ``target``.
  """
  if target is None:
    return True  # Without a call: copy=False asks this at every import.
  if isinstance(source, Array):
    return holds(source, target)
  return is_only(target, source)


def describe_source(source: Any) -> str:
  """A source as messages write it: a device, or a ``jax.Array``'s sharding."""
  return describe(source.sharding if isinstance(source, Array) else source)


def is_host(target: Target) -> bool:
  return all(d.platform == "cpu" for d in devices_of(target))


def describe(target: Target) -> str:
  """A device as upstream writes it (its ``repr``), or a sharding's devices."""
  if isinstance(target, Sharding):
    devices = sorted(map(repr, devices_of(target)))
    return f"{type(target).__name__} over {devices}"
  return repr(target)


def place(array: Any, target: Target | Format,
          may_alias: bool | None = None) -> Array:
  """Transfers (and for a multi-device sharding, shards) ``array``.

  Unless ``may_alias`` is ``False``, it may alias ``array`` on its own device.
  """
  placed: Array = device_put(array, target, may_alias=may_alias)
  return placed


def place_in_format(array: Any, layout: Any,
                    sharding: Target | None) -> Array:
  """Transfers ``array`` onto ``sharding`` (if any), then into ``layout``.

  ``sharding`` may be a device. Two steps: ``device_put`` takes a ``Format``
  only on the array's own devices (before JAX 0.10, in its memory kind too).
  """
  if sharding is not None and not holds(array, sharding):
    array = place(array, sharding)
  if layout is not None and not dlpack_compat.layout_matches(
      layout, dlpack_compat.layout_of(array)):
    array = place(array, dlpack_compat.FORMAT_TYPE(layout, array.sharding))
  placed: Array = array
  return placed


def holds(array: Any, target: Target) -> bool:
  """Whether ``array`` already lies exactly as ``target`` asks."""
  if isinstance(target, Sharding):
    return bool(array.sharding.is_equivalent_to(target, array.ndim))
  return set(array.sharding.device_set) == {target}


def single_device(x: Any, caller: str) -> Device:
  """Returns the one device holding ``x``.

  Raises:
    BufferError: ``x`` is sharded over several devices; DLPack describes
      one buffer.
  """
  sharding = x.sharding
  if type(sharding) is SingleDeviceSharding:  # pylint: disable=unidiomatic-typecheck
    # device_set's answer without building the set: every export asks.
    device: Device = sharding._device  # pylint: disable=protected-access
    return device
  devices = sharding.device_set
  if len(devices) != 1:
    raise BufferError(
        f"{caller} supports only single-device arrays, but this one is "
        f"sharded over {len(devices)} devices.")
  device, = devices
  return device


_UPSTREAM_DEVICE_TYPES: dict[int, DLDeviceType] = {
    int(member): member for member in DLDeviceType}


def _device_type(code: int) -> DLDeviceType | int:
  """Upstream's enum member for ``code``, or the bare code if it has none."""
  return _UPSTREAM_DEVICE_TYPES.get(code, code)


def dlpack_device_of_array(x: Any) -> tuple[DLDeviceType | int, int]:
  """``jax.Array.__dlpack_device__``: the DLPack device of ``x``'s buffer.

  Unlike upstream, a CPU array reports its device's hardware id, so a JAX
  round trip keeps the device (the CPU id rule: docs/behaviour.md).

  Raises:
    BufferError: ``x`` spans several devices, or its memory has no DLPack
      device type (:func:`dl_device_type`); the message names a host route.
  """
  device = single_device(x, "__dlpack_device__")
  cpu = host_dl_device(device)
  if cpu is not None:
    return cpu
  memory_kind = x.sharding.memory_kind
  code = dl_device_type_of(device, memory_kind)
  if code is None:
    raise BufferError(unnameable_memory_message(
        "__dlpack_device__", device, memory_kind))
  hardware_id = device.local_hardware_id
  if hardware_id is None:
    raise BufferError(
        f"__dlpack_device__: {device} has no local hardware id.")
  return _device_type(code), hardware_id


def host_dl_device(device: Device) -> tuple[DLDeviceType | int, int] | None:
  """The DLPack device of a CPU device, with its own id; ``None`` for others."""
  cpu = _CPU_DL_DEVICES.get(device)
  if cpu is None and device.platform == "cpu":
    cpu = _CPU_DL_DEVICES[device] = (_device_type(KDL_CPU),
                                     device.local_hardware_id or 0)
  return cpu


_CPU_DL_DEVICES: dict[Device, tuple[DLDeviceType | int, int]] = {}


def dl_device_type(platform: str, platform_version: str,
                   memory_kind: str | None) -> int | None:
  """DLPack's device type for a JAX device's memory; ``None`` if none names it.

  The one map from JAX memory to DLPack device types, for export and
  ``__dlpack_device__``; plain values in, so every row is testable anywhere.

  Args:
    platform: the device's ``platform`` (``"cpu"``, ``"gpu"``, ``"tpu"``).
    platform_version: its client's, telling CUDA, ROCm and oneAPI apart.
    memory_kind: the array's; ``None`` or ``"device"`` for device memory.

  Returns:
    The type, or ``None`` where DLPack up to 1.3 has none: TPU device memory
    (``kDLTPU = 19`` is unreleased; jaxlib will not export it), unknown GPUs.
    TPU pinned host is ``kDLTPUHost`` (20, DLPack main), as JAX main says.
  """
  pinned_host = memory_kind == "pinned_host"
  if platform == "cpu":
    return KDL_CPU
  if platform == "tpu":
    return KDL_TPU_HOST if pinned_host else None
  if platform != "gpu":
    return None
  if "cuda" in platform_version:
    return KDL_CUDA_HOST if pinned_host else KDL_CUDA
  if "rocm" in platform_version:
    return KDL_ROCM_HOST if pinned_host else KDL_ROCM
  if "oneapi" in platform_version and not pinned_host:
    return KDL_ONEAPI
  return None


def dl_device_type_of(device: Device, memory_kind: str | None) -> int | None:
  """:func:`dl_device_type` of ``device``'s memory of ``memory_kind``."""
  if device.platform == "cpu":
    return KDL_CPU
  return dl_device_type(device.platform, device.client.platform_version,
                        memory_kind)


def unnameable_memory_message(caller: str, device: Device,
                              memory_kind: str | None) -> str:
  """Why ``caller`` cannot hand ``device``'s memory over, and what works."""
  return (
      f"{caller}: DLPack has no device type for memory of {device} (memory "
      f"kind {memory_kind or 'device'}), so it cannot be shared. Ask for a "
      "host copy instead: __dlpack__(dl_device=(1, 0)), as "
      "np.from_dlpack(x, device='cpu') asks, or move it first with "
      "jax.device_put(x, jax.devices('cpu')[0]).")


def check_export_stream(stream: Any, dl_type: int, caller: str) -> None:
  """Raises ``BufferError`` for a ``stream`` DLPack rules out on ``dl_type``.

  Per the spec: ``None`` and ``-1`` (no sync) always; on CUDA also ``1``
  (legacy default), ``2`` (per-thread) and pointers (> 2), never ``0``; on
  ROCm ``0`` (default) and pointers, never ``1`` or ``2``. Others: no streams.
  """
  if stream is None or stream == -1:
    return
  if dl_type == KDL_CUDA and stream >= 1:
    return
  if dl_type == KDL_ROCM and (stream == 0 or stream > 2):
    return
  allowed = {KDL_CUDA: "None, -1, 1, 2 or a stream pointer (0 is ambiguous "
                       "and disallowed)",
             KDL_ROCM: "None, -1, 0 or a stream pointer"}.get(
                 dl_type, "None or -1: this memory has no streams")
  raise BufferError(
      f"{caller}: stream={stream!r} is invalid for DLPack device type "
      f"{dl_type}; pass {allowed}.")
