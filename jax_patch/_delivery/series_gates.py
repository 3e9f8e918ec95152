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

"""JAX's pre-commit gates, as the series' checks run them.

After each step, on the files it touched: JAX's pre-commit hooks
(check-ast, end-of-file-fixer, trailing-whitespace, debug-statements) and
ruff with the tree's own configuration; and pyrefly over the whole tree,
as JAX's pre-commit runs it, with no error the base lacks (:func:`lint`).
"""

from __future__ import annotations

import collections
import json
import pathlib
import shutil
import subprocess

from jax_patch._delivery import series_tree


def _interpreter_path(python: str) -> str:
  return str(pathlib.Path(shutil.which(python) or python).absolute())


def _hook_problems(repo: pathlib.Path, python: str,
                   files: list[str]) -> list[str]:
  """What JAX's pre-commit hooks find in ``files``' Python.

  The hooks: check-ast and debug-statements (run by ``python``, whose
  grammar the target's code is written for), end-of-file-fixer and
  trailing-whitespace.
  """
  names = [name for name in files
           if name.endswith((".py", ".pyi")) and (repo / name).is_file()]
  problems = _parsed_problems(repo, python, names)
  for name in names:
    text = (repo / name).read_text()
    if name.endswith(".py"):
      if text and (not text.endswith("\n") or text.endswith("\n\n")):
        problems.append(f"{name}: end-of-file-fixer: the file must end in "
                        "one newline")
      problems.extend(
          f"{name}:{number}: trailing-whitespace"
          for number, line in enumerate(text.splitlines(), start=1)
          if line != line.rstrip())
  return problems


# check-ast and debug-statements, in the target's interpreter: a tree
# written for Python 3.12 may not parse with the one jax-patch runs on.
_PARSED_HOOKS = """
import ast, sys
DEBUGGERS = {"bpdb", "ipdb", "pdb", "pdbr", "pudb", "pydevd_pycharm", "q",
             "rdb", "rpdb", "wdb"}
def debugging(node):
  if isinstance(node, ast.Import):
    return any(a.name.split(".")[0] in DEBUGGERS for a in node.names)
  if isinstance(node, ast.ImportFrom):
    return (node.module or "").split(".")[0] in DEBUGGERS
  return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id == "breakpoint")
for name in sys.argv[1:]:
  try:
    tree = ast.parse(open(name).read(), name)
  except SyntaxError as err:
    print(f"{name}:{err.lineno}: check-ast: {err.msg}")
    continue
  if name.endswith(".py"):
    for node in ast.walk(tree):
      if debugging(node):
        print(f"{name}:{getattr(node, 'lineno', '?')}: debug-statements")
"""


def _parsed_problems(repo: pathlib.Path, python: str,
                     names: list[str]) -> list[str]:
  if not names:
    return []
  done = series_tree.run(repo, python, "-c", _PARSED_HOOKS, *names)
  if done.returncode:
    raise series_tree.SeriesError(f"check-ast did not run in {python}: "
                                  f"{done.stderr[-1000:]}")
  return done.stdout.splitlines()


# The tools JAX's pre-commit gates run, each a Python package, and the
# jax-patch extra that pins them.
GATE_TOOLS = ("ruff", "pyrefly")
GATE_EXTRA = "series"


def missing_gate_tools(python: str) -> list[str]:
  """The gate tools ``python`` cannot run, in ``GATE_TOOLS`` order."""
  done = subprocess.run(
      [python, "-c", "import importlib.util, sys; print(' '.join(name for "
       "name in sys.argv[1:] if importlib.util.find_spec(name) is None))",
       *GATE_TOOLS], capture_output=True, text=True, check=False)
  if done.returncode:
    raise series_tree.SeriesError(
        f"--python {python} does not run: {done.stderr.strip()[-300:]}")
  return done.stdout.split()


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
  hooks = _hook_problems(repo, python, touched)
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
