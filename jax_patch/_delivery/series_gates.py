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

"""JAX's pre-commit gates and type check, as the series' checks run them.

On the files a patch touches: the target's own type checker (pyrefly or
mypy, as its ``pyproject.toml`` configures; :func:`type_check`, with the
patch's typing probe), JAX's pre-commit hooks and ruff (:func:`lint`); and
pyrefly over the whole tree, with no error the base lacks
(:func:`pyrefly_errors`).
"""

from __future__ import annotations

import ast
import collections
import json
import pathlib
import shutil

from jax_patch._delivery import series_patches
from jax_patch._delivery import series_tree

def write_probe(repo: pathlib.Path, patch: series_patches.SeriesPatch) -> str:
  """Writes ``patch``'s typing probe where the target's checker looks."""
  # Inside jax/, which JAX's pyrefly configuration includes; not committed.
  path = f"jax/_jax_patch_probe_{patch.slug.replace('-', '_')}.py"
  (repo / path).write_text(patch.typing_probe)
  return path


def type_checker(repo: pathlib.Path, python: str) -> list[str]:
  """The target's own type checker, as ``python`` arguments; [] if none."""
  config = (repo / "pyproject.toml").read_text() if (
      repo / "pyproject.toml").is_file() else ""
  if "[tool.pyrefly]" in config:
    # Told the interpreter: by default it asks the first python on PATH.
    return ["-m", "pyrefly", "check", "--python-interpreter-path",
            _interpreter_path(python)]
  if "[tool.mypy]" in config:
    return ["-m", "mypy", "--config-file", "pyproject.toml"]
  return []


def type_check(repo: pathlib.Path, python: str, checker: list[str],
               files: list[str]) -> str:
  """``checker`` (:func:`type_checker`) on ``files``: "ok", or its report."""
  if not files or not checker:
    return "ok"  # Nothing touched, or the target configures no checker.
  done = series_tree.run(repo, python, *checker, *files)
  if done.returncode:
    return (done.stdout + done.stderr).strip()[-2000:] or "failed"
  return "ok"


def _interpreter_path(python: str) -> str:
  return str(pathlib.Path(shutil.which(python) or python).absolute())


# The modules pre-commit's debug-statements hook refuses to see imported.
_DEBUGGERS = frozenset({"bpdb", "ipdb", "pdb", "pdbr", "pudb",
                        "pydevd_pycharm", "q", "rdb", "rpdb", "wdb"})


def _hook_problems(repo: pathlib.Path, files: list[str]) -> list[str]:
  """What JAX's pre-commit hooks find in ``files``' Python.

  The hooks: check-ast, end-of-file-fixer, trailing-whitespace and
  debug-statements.
  """
  problems = []
  for name in files:
    if not name.endswith((".py", ".pyi")) or not (repo / name).is_file():
      continue
    text = (repo / name).read_text()
    try:
      tree = ast.parse(text, name)
    except SyntaxError as err:
      problems.append(f"{name}:{err.lineno}: check-ast: {err.msg}")
      continue
    if name.endswith(".py"):
      if text and (not text.endswith("\n") or text.endswith("\n\n")):
        problems.append(f"{name}: end-of-file-fixer: the file must end in "
                        "one newline")
      problems.extend(
          f"{name}:{number}: trailing-whitespace"
          for number, line in enumerate(text.splitlines(), start=1)
          if line != line.rstrip())
      problems.extend(f"{name}:{getattr(node, 'lineno', '?')}: "
                      "debug-statements"
                      for node in ast.walk(tree) if _is_debugging(node))
  return problems


def _is_debugging(node: ast.AST) -> bool:
  if isinstance(node, ast.Import):
    return any(alias.name.split(".")[0] in _DEBUGGERS for alias in node.names)
  if isinstance(node, ast.ImportFrom):
    return (node.module or "").split(".")[0] in _DEBUGGERS
  return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id == "breakpoint")


def pyrefly_errors(repo: pathlib.Path,
                   python: str) -> collections.Counter[tuple[str, ...]]:
  """pyrefly's errors over the whole tree, as JAX's pre-commit runs it.

  Keyed by file, kind and message, not line: a patch moves lines.

  Raises:
    series_tree.SeriesError: pyrefly did not run.
  """
  # The scratch tree may sit in a hidden, ignored folder (nox's TMPDIR is
  # in .nox/), which pyrefly's default excludes and ignore files would skip
  # whole. The tree's own project-excludes still hold; the defaults dropped
  # (node_modules, venv, __pycache__) hold nothing of a git copy's.
  done = series_tree.run(repo, python, "-m", "pyrefly", "check",
                         "--python-interpreter-path",
                         _interpreter_path(python),
                         "--use-ignore-files=false",
                         "--disable-project-excludes-heuristics",
                         "--output-format", "json")
  try:
    errors = json.loads(done.stdout)["errors"]
  except (ValueError, KeyError) as err:
    raise series_tree.SeriesError(
        f"pyrefly did not run in {python}: "
        f"{(done.stdout + done.stderr)[-1000:]}") from err
  return collections.Counter(
      (error["path"], error["name"], error["concise_description"])
      for error in errors)


def ruff_findings(repo: pathlib.Path, python: str,
                  files: list[str]) -> collections.Counter[tuple[str, ...]]:
  """ruff's findings in ``files``, with the tree's own configuration.

  Keyed by file, rule and message, not line: a patch moves lines.

  Raises:
    series_tree.SeriesError: ruff did not run.
  """
  python_files = [name for name in files
                  if name.endswith((".py", ".pyi")) and (repo / name).is_file()]
  if not python_files:
    return collections.Counter()
  done = series_tree.run(repo, python, "-m", "ruff", "check", "--no-cache",
                         "--output-format", "json", *python_files)
  try:
    findings = json.loads(done.stdout)
  except ValueError as err:
    raise series_tree.SeriesError(
        f"ruff did not run in {python}: "
        f"{(done.stdout + done.stderr)[-1000:]}") from err
  return collections.Counter(
      (str(pathlib.Path(finding["filename"]).relative_to(repo.resolve())),
       finding["code"] or "", finding["message"])
      for finding in findings)


def lint(repo: pathlib.Path, python: str, touched: list[str],
         ruff_before: collections.Counter[tuple[str, ...]],
         base_errors: collections.Counter[tuple[str, ...]] | None
         ) -> dict[str, str]:
  """JAX's pre-commit gates after a step: the failing ones, with why.

  A release's own tree need not pass the ruff pinned here, so only what the
  step adds counts, for ruff as for pyrefly.

  Args:
    touched: the files the step's patch changed.
    ruff_before: ruff's findings in ``touched`` before the step.
    base_errors: pyrefly's errors on the unpatched tree; ``None`` where the
      target configures no pyrefly.
  """
  failed = {}
  hooks = _hook_problems(repo, touched)
  if hooks:
    failed["pre-commit hooks"] = "\n".join(hooks)
  new_ruff = ruff_findings(repo, python, touched) - ruff_before
  if new_ruff:
    failed["ruff"] = "\n".join(
        f"{path}: {code} {message}" for path, code, message in sorted(new_ruff))
  if base_errors is not None:
    new = pyrefly_errors(repo, python) - base_errors
    if new:
      failed["pyrefly (whole tree)"] = "\n".join(
          f"{path}: [{kind}] {message}" for path, kind, message in sorted(new))
  return failed
