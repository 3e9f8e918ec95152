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

"""Applies our declarations to JAX's own files, as minimal edits.

The typing corrections live in ``stubs/jax``, the source ones in
``patches/jax``; each file there holds only the declarations jax-patch sets.
A declaration replaces the one of the same name (and class) in JAX's file,
overloads included; one JAX lacks goes in after the declaration that comes
before it in our file. Every other line of JAX's file is left alone, so the
edit is as small as the change.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
import dataclasses
import os
import pathlib
import shutil
from typing import Any

# Not resolve(): under Bazel the runfiles tree is the project.
_PROJECT = pathlib.Path(__file__).absolute().parents[2]
# A wheel carries a copy of the declaration trees here (setup.py); a checkout
# and an editable install read the project's own.
_WHEEL_COPY = pathlib.Path(__file__).absolute().parent / "declarations"
_DECLARATIONS = _WHEEL_COPY if _WHEEL_COPY.is_dir() else _PROJECT
STUBS_ROOT = _DECLARATIONS / "stubs"
PATCHES_ROOT = _DECLARATIONS / "patches"

# Each JAX file jax-patch edits, relative to the folder holding jax/, and the
# file of declarations it gets.
CORRECTIONS = (
    ("jax/numpy/__init__.pyi", STUBS_ROOT / "jax/numpy/__init__.pyi"),
    ("jax/_src/basearray.pyi", STUBS_ROOT / "jax/_src/basearray.pyi"),
    ("jax/_src/array.py", PATCHES_ROOT / "jax/_src/array.py"),
)


@dataclasses.dataclass(frozen=True)
class _Declaration:
  key: tuple[str | None, str]  # (class name or None, function name)
  start: int  # 0-based first line, decorators and leading comments included
  end: int  # 0-based line after the last
  comment_start: int  # 0-based first line of the comment block above it


def _declarations(source: str) -> list[_Declaration]:
  lines = source.splitlines()
  found: list[_Declaration] = []
  for node, scope in _functions(ast.parse(source)):
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    comment_start = start
    while comment_start and lines[comment_start - 1].lstrip().startswith("#"):
      comment_start -= 1
    end = node.end_lineno or node.lineno
    found.append(_Declaration((scope, node.name), start, end, comment_start))
  return found


def spans(source: str) -> dict[tuple[str | None, str], tuple[int, int]]:
  """Maps each declaration to the lines it covers, all overloads together."""
  found: dict[tuple[str | None, str], tuple[int, int]] = {}
  for declaration in _declarations(source):
    start, end = found.get(declaration.key,
                           (declaration.start, declaration.end))
    found[declaration.key] = (min(start, declaration.start),
                              max(end, declaration.end))
  return found


def _call_shapes(source: str) -> dict[tuple[str | None, str], list[Any]]:
  """Each declaration's parameters, overload by overload, without types.

  Names and kinds (positional-only, either, ``*args``, keyword-only,
  ``**kwargs``) and which have defaults: what calls a declaration accepts,
  as far as its annotations are left aside.
  """
  shapes: dict[tuple[str | None, str], list[Any]] = {}
  for node, scope in _functions(ast.parse(source)):
    arguments = node.args
    shapes.setdefault((scope, node.name), []).append((
        [a.arg for a in arguments.posonlyargs],
        [a.arg for a in arguments.args], len(arguments.defaults),
        arguments.vararg and arguments.vararg.arg,
        [a.arg for a in arguments.kwonlyargs],
        [default is not None for default in arguments.kw_defaults],
        arguments.kwarg and arguments.kwarg.arg))
  return shapes


def _functions(module: ast.Module) -> Iterator[
    tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]]:
  """Each top-level function and method, with its class name or ``None``."""
  for node in module.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      yield node, None
    elif isinstance(node, ast.ClassDef):
      for member in node.body:
        if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
          yield member, node.name


def _indent(line: str) -> str:
  return line[:len(line) - len(line.lstrip())]


def _reindent(lines: list[str], indent: str) -> list[str]:
  current = _indent(lines[0])
  return [indent + line[len(current):] if line.startswith(current) else line
          for line in lines]


def corrected(original: str, corrections: str,
              keep_same_shape: bool = False) -> str:
  """Returns ``original`` with the declarations of ``corrections`` set.

  Args:
    keep_same_shape: keep JAX's own declaration where it already takes the
      same parameters as ours (names, kinds, which have defaults), as a
      typing stub may: its annotations can then only be as good as ours or
      better (JAX 0.12.1 declares ``from_dlpack``'s ``device`` with
      ``Format`` too). Not for code, whose bodies differ.

  Raises:
    ValueError: a declaration JAX lacks has no earlier declaration in
      ``corrections`` to go after.
  """
  lines = original.splitlines(keepends=True)
  fix_lines = corrections.splitlines(keepends=True)
  declared = spans(original)
  shapes = _call_shapes(original) if keep_same_shape else {}
  fix_shapes = _call_shapes(corrections) if keep_same_shape else {}
  edits: list[tuple[int, int, list[str]]] = []
  previous: tuple[str | None, str] | None = None
  for fix in _declarations(corrections):
    if fix.key in shapes and shapes[fix.key] == fix_shapes[fix.key]:
      pass  # JAX's own already takes what ours does.
    elif fix.key in declared:
      start, end = declared[fix.key]
      text = _reindent(fix_lines[fix.start:fix.end], _indent(lines[start]))
      edits.append((start, end, text))
    elif previous is not None and previous in declared:
      after = declared[previous][1]
      indent = _indent(lines[declared[previous][0]])
      text = _reindent(fix_lines[fix.comment_start:fix.end], indent)
      edits.append((after, after, text))
    else:
      raise ValueError(f"cannot place {fix.key}: JAX's file lacks it and "
                       "nothing before it to follow")
    previous = fix.key
  for start, end, text in sorted(edits, reverse=True):
    lines[start:end] = text
  return "".join(lines)


def correct_tree(root: pathlib.Path) -> list[str]:
  """Applies every correction to the JAX tree at ``root``, in place.

  Returns:
    The files that changed, relative to ``root``.
  """
  changed = []
  for relative, corrections in CORRECTIONS:
    target = root / relative
    original = target.read_text()
    updated = corrected(original, corrections.read_text(),
                        keep_same_shape=relative.endswith(".pyi"))
    if updated != original:
      if target.is_symlink():
        target.unlink()
      target.write_text(updated)
      changed.append(relative)
  return changed


def linked_copy(jax_package: pathlib.Path, root: pathlib.Path) -> pathlib.Path:
  """Mirrors ``jax_package`` under ``root/jax`` as links, for cheap editing.

  Returns:
    ``root``, which now holds a ``jax`` package a type checker can be
    pointed at in place of the installed one.
  """
  shutil.copytree(jax_package, root / "jax", copy_function=os.symlink,
                  ignore=shutil.ignore_patterns("__pycache__"))
  return root
