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

"""What delivers the patch to a JAX tree, apart from what runs inside JAX.

``jax_patch/_src`` mirrors JAX's ``jax/_src``: its modules run inside JAX,
installed or vendored. This package writes them into a JAX tree and takes
them out (``vendor``), sets our declarations in JAX's own files
(``source_patch``, ``stubs``), corrects JAX's DLPack test where it
contradicts the standard (``jax_test_corrections``), applies and checks the upstream pull
requests, which are files in ``upstream/`` (``series``, the command, over
``upstream_set``, ``series_tree``, ``series_check`` and the rest), runs the
conformance cases (``check``) and the command line (``cli``). Nothing in
``jax_patch/_src`` imports it.
"""
