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

"""What checks the patch, apart from what runs inside JAX.

``conformance`` is the Array API conformance catalogue: the cases
``jax-patch check``, the tests and the device checks run against a
``from_dlpack``, and the producers and helpers they build their inputs
with. It imports the runtime (``jax_patch._src``); nothing there imports it.
Vendoring writes it beside JAX's tests (``tests/dlpack_conformance.py``),
never into ``jax/_src``.
"""
