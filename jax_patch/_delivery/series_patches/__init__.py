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

"""The upstream patch series: one behaviour each, as edits to JAX's files.

Each patch edits JAX's own ``jax/_src/dlpack.py`` (and ``jax/_src/array.py``)
in place, in JAX's style, for the jaxlib range of JAX main and the newest
release (jaxlib 0.11.0 on): the version gates jax_patch keeps for jaxlib
back to 0.4.35 are constant there, and none of them appears. Nothing of
jax_patch's ctypes capsule layer goes upstream: what jaxlib does in C++
(DLPack 1.x capsules, from jaxlib 0.12 on) a patch leaves to jaxlib, and
with an older jaxlib from_dlpack keeps upstream's behaviour (``NEEDS_JAXLIB``
names the cases that holds back). A defect in jaxlib's C++ is reported
upstream, with a reproducer (``series_reports``), not worked around here.
Each patch also adds its tests to JAX's ``tests/array_interoperability_test.py``
where the target has it, and names the conformance cases
(``conformance.CASES``) it makes pass; ``series_check`` checks each
claim after applying the patches up to it.

An edit replaces one exact, unique text of the target: where JAX's text has
moved, the series refuses with the patch and the text it looked for.

Each pull request is a module of this package: its patch (in one form, or
two where a jaxlib version decides), its tests and its changelog entry.
``base`` holds what they are made of and where in JAX's test they add
tests.
"""

from __future__ import annotations

import re
import textwrap

from jax_patch._delivery import series_reports
from jax_patch._delivery.series_patches import base
from jax_patch._delivery.series_patches import basearray_stub
from jax_patch._delivery.series_patches import copy_argument
from jax_patch._delivery.series_patches import copy_true_copies
from jax_patch._delivery.series_patches import cpu_device_id
from jax_patch._delivery.series_patches import device_argument
from jax_patch._delivery.series_patches import exception_classes
from jax_patch._delivery.series_patches import export_legacy_copy
from jax_patch._delivery.series_patches import export_missing_platform
from jax_patch._delivery.series_patches import fast_cpu_import
from jax_patch._delivery.series_patches import finished_at_return
from jax_patch._delivery.series_patches import foreign_platform
from jax_patch._delivery.series_patches import jax_array_keeps_device
from jax_patch._delivery.series_patches import multi_device_sharding
from jax_patch._delivery.series_patches import no_silent_narrowing
from jax_patch._delivery.series_patches import no_tracing
from jax_patch._delivery.series_patches import non_row_major
from jax_patch._delivery.series_patches import strided_input


# The package's interface: what the series_* modules and the tests use.
Edit = base.Edit
SeriesPatch = base.SeriesPatch
DLPACK = base.DLPACK
INTEROP_TEST = base.INTEROP_TEST
CHANGELOG = base.CHANGELOG


def for_target(min_jaxlib: tuple[int, ...], max_jaxlib: tuple[int, ...]
               ) -> tuple[base.SeriesPatch, ...]:
  """The series for a JAX supporting jaxlib ``min_jaxlib`` to ``max_jaxlib``."""
  return tuple(patch for patch in SERIES
               if patch.is_for(min_jaxlib, max_jaxlib))


def with_dependencies(
    patch: base.SeriesPatch, series: tuple[base.SeriesPatch, ...]
) -> tuple[base.SeriesPatch, ...]:
  """``patch``'s dependencies in ``series``, transitively, then ``patch``.

  In series order: the commits its pull request applies on the base. A
  behaviour ``series`` lacks is one the target has without the series (its
  jaxlib does it), so nothing is applied for it.
  """
  by_behaviour = {each.behaviour: each for each in series}
  wanted: set[str] = set()
  pending = [patch.behaviour]
  while pending:
    behaviour = pending.pop()
    if behaviour not in wanted and behaviour in by_behaviour:
      wanted.add(behaviour)
      pending.extend(by_behaviour[behaviour].depends_on)
  return tuple(each for each in series if each.behaviour in wanted)


# The pull requests, in the order docs/upstream.md recommends sending them: the
# stack's order.
_PULL_REQUESTS = (
    exception_classes,
    copy_argument,
    device_argument,
    no_silent_narrowing,
    copy_true_copies,
    no_tracing,
    jax_array_keeps_device,
    cpu_device_id,
    strided_input,
    multi_device_sharding,
    finished_at_return,
    foreign_platform,
    export_missing_platform,
    export_legacy_copy,
    non_row_major,
    fast_cpu_import,
    basearray_stub,
)

SERIES: tuple[base.SeriesPatch, ...] = tuple(
    form for pull_request in _PULL_REQUESTS for form in pull_request.FORMS)


# Conformance cases jax_patch passes and upstream (0.12.0.1, JAX main)
# fails that no patch of the series claims yet: each is a patch still to
# write. A test keeps this list, the claims and the conformance results
# consistent.
NOT_YET_IN_SERIES: frozenset[str] = frozenset({
    # Issue 36: jax.Array.__dlpack__(stream=0 or -2) on the CPU reaches
    # jaxlib, which raises UNIMPLEMENTED; a jax.Array sharded over several
    # devices, imported with device=<one of them>, goes through __dlpack__,
    # which refuses sharded arrays.
    "export_cpu_stream_raises", "jax_array_sharded_onto_one_device",
    # Issue 45's export cases (dl_device ids, the int4 hint, max_version,
    # stream=-1): the patch set as files on JAX main (issue 47) brings them.
    "export_cpu_dl_device_any_id_aliases",
    "export_cpu_stream_minus_one_exports",
    "export_int4_raises_with_conversion_hint",
    "export_max_version_negotiated"})

# Conformance cases whose behaviour is a new restriction, which upstream
# takes through a deprecation period (JAX's API compatibility policy): the
# series warns (deprecate-under-transformations) where jax_patch's runtime
# raises already, and the cases pass once the deprecation is accelerated.
IN_DEPRECATION: frozenset[str] = frozenset({
    "inside_grad_raises", "inside_jit_raises", "inside_scan_raises",
    "inside_vmap_raises"})

# Conformance cases that take DLPack 1.x capsules, which jaxlib reads and
# writes from the version given on (0.12: jaxlib_extension_version 496 for
# export, 499 for import). With an older jaxlib, from_dlpack and __dlpack__
# keep upstream's behaviour: a read-only array cannot be exported as 0.x
# (NumPy raises BufferError), and an export asked for 1.x returns 0.x, as
# the standard lets a producer do; a producer's 1.x-only capsule (IS_COPIED
# set, say) is refused by name. jax_patch's runtime converts capsules
# itself there (its ctypes layer); upstream, the fix is the newer jaxlib.
NEEDS_JAXLIB: dict[str, tuple[int, ...]] = dict.fromkeys((
    "cpu_producer_gets_stream_none",
    "copy_false_producer_copied_raises",
    "copy_false_read_only_copy_raises",
    "copy_none_broadcast_imports",
    "donation_leaves_read_only_source_unchanged",
    "export_copy_true_is_copied",
    "export_versioned_read_only",
    "memory_mapped_file_imports_without_copy",
    "producer_without_copy_keyword_imports",
    "read_only_imports_without_copy",
    "versioned_only_producer_imports"), (0, 12))


def left_undone(jaxlib: tuple[int, ...]) -> frozenset[str]:
  """The cases the fully applied series may fail with ``jaxlib``.

  Those no patch claims yet, those still in a deprecation period, those
  that need a newer jaxlib, and those a jaxlib defect reported upstream
  (``series_reports``) holds back.
  """
  return (NOT_YET_IN_SERIES | IN_DEPRECATION | needs_newer_jaxlib(jaxlib)
          | frozenset(
              case for report in series_reports.REPORTS
              if series_reports.affects(report, jaxlib)
              for case in report.cases))


def needs_newer_jaxlib(jaxlib: tuple[int, ...]) -> frozenset[str]:
  """The cases ``jaxlib`` is too old for (``NEEDS_JAXLIB``)."""
  return frozenset(case for case, needed in NEEDS_JAXLIB.items()
                   if jaxlib < needed)


# Each patch's entry in JAX's CHANGELOG.md, by slug: a gated form says
# what its ungated form says.
CHANGELOG_ENTRIES: dict[str, tuple[str, str]] = {
    form.slug: pull_request.CHANGELOG
    for pull_request in _PULL_REQUESTS for form in pull_request.FORMS}

# The sections of a release in JAX's CHANGELOG.md, in the order JAX writes
# them.
CHANGELOG_SECTIONS = ("New features", "Breaking changes", "Changes",
                      "Deprecations", "Bug fixes")
UNRELEASED = "## Unreleased"


def _item(patch: base.SeriesPatch) -> list[str]:
  """The patch's changelog item, as lines."""
  _, item = CHANGELOG_ENTRIES[patch.slug]
  # JAX aligns an item's lines with its first, within 80 columns.
  return textwrap.wrap(" ".join(item.split()), width=80,
                       initial_indent="  * ", subsequent_indent="    ",
                       break_long_words=False, break_on_hyphens=False)


def changelog(patch: base.SeriesPatch) -> str:
  """The patch's entry for JAX's CHANGELOG.md, as it goes under Unreleased."""
  section, _ = CHANGELOG_ENTRIES[patch.slug]
  return f"{UNRELEASED}\n\n* {section}\n" + "\n".join(_item(patch)) + "\n"


def _section_name(line: str) -> str | None:
  """The section a top-level item of a release names, if ``line`` is one.

  As in "* Bug fixes:".
  """
  match = re.fullmatch(r"\* ([A-Z][A-Za-z ]*?):?\s*", line)
  return match.group(1).capitalize() if match else None


def with_changelog_entry(text: str, patch: base.SeriesPatch) -> str:
  """JAX's CHANGELOG.md (``text``) with the patch's entry added.

  The item goes last in its section of the Unreleased release, as a
  maintainer adds one: the section is made, in JAX's order of sections,
  where the release lacks it, and the release where the file lacks it
  (above the newest release). A file that holds the item already is
  returned as it is.
  """
  item = _item(patch)
  if "\n".join(item) in text:
    return text
  lines = text.split("\n")
  if UNRELEASED not in lines:
    first = next((i for i, line in enumerate(lines) if line.startswith("## ")),
                 len(lines))
    lines[first:first] = [UNRELEASED, ""]
  start = lines.index(UNRELEASED) + 1
  end = next((i for i in range(start, len(lines))
              if lines[i].startswith("## ")), len(lines))
  section, _ = CHANGELOG_ENTRIES[patch.slug]
  heads = {_section_name(lines[i]): i for i in range(start, end)
           if _section_name(lines[i])}
  if section.capitalize() in heads:
    # After the section's last item: up to the next section, less blanks.
    at = next((i for i in range(heads[section.capitalize()] + 1, end)
               if _section_name(lines[i])), end)
    while not lines[at - 1].strip():
      at -= 1
    lines[at:at] = item
    return "\n".join(lines)
  rank = CHANGELOG_SECTIONS.index(section)
  later = [i for name, i in heads.items()
           if name in CHANGELOG_SECTIONS
           and CHANGELOG_SECTIONS.index(name) > rank]
  if later:
    at = min(later)
  else:  # Last: after the release's last line that is not blank.
    at = end
    while at > start and not lines[at - 1].strip():
      at -= 1
    lines[at:at] = [""]
    at += 1
  lines[at:at] = [f"* {section}", *item, ""]
  # One blank line, not two, before the next release's heading.
  return re.sub(r"\n{3,}(?=## )", "\n\n", "\n".join(lines))


def added_tests(patch: base.SeriesPatch) -> list[str]:
  """The JAX test methods the patch adds or changes, by name."""
  names: set[str] = set()
  defined = re.compile(r"^  def (test\w+)\(", re.MULTILINE)
  for edit in patch.test_edits:
    # Not the test an edit is placed before: it is in ``old`` too.
    names.update(set(defined.findall(edit.new))
                 - set(defined.findall(edit.old)))
    if edit.old and edit.old not in edit.new:
      # An edit that changes a test, not one placed before it: name the
      # test it is in, if JAX's text says.
      names.update(re.findall(r"def (test\w+)\(", edit.old))
  return sorted(names)


def description(patch: base.SeriesPatch,
                dependencies: tuple[base.SeriesPatch, ...] = ()) -> str:
  """The pull request's description, as its pull request's text.

  What was wrong, the standard's clause and the measured upstream
  behaviour (the commit message's body), the pull requests it goes on
  after (``dependencies``, by title), how to test it, and its changelog
  entry.
  """
  parts = [f"# {patch.subject}\n", patch.body]
  if dependencies:
    parts.append(
        "## Depends on\n\nThis pull request is cut on top of these, which "
        "merge before it (its branch holds their commits):\n\n"
        + "".join(f"- {each.subject}\n" for each in dependencies))
  parts.append("## How to test\n")
  tests = added_tests(patch)
  if tests:
    parts.append(
        "```sh\npytest tests/array_interoperability_test.py -k "
        f"\"{' or '.join(tests)}\"\n```\n")
  if patch.typing_probe:
    parts.append("The target's type checker (pyrefly, as JAX's pre-commit "
                 "runs it) accepts this after the change and rejects it "
                 "before:\n\n```python\n" + patch.typing_probe + "```\n")
  if patch.runtime_probe:
    parts.append("This script fails before the change and passes after "
                 "it:\n\n```python\n" + patch.runtime_probe + "```\n")
  if patch.claims:
    parts.append(
        "The Array API conformance cases it makes pass, as jax-patch (which "
        "prepared this change) names them: "
        + ", ".join(f"`{claim}`" for claim in patch.claims) + ".\n")
  if patch.speed_cost:
    parts.append("## What it costs\n\n" + patch.speed_cost)
  parts.append("## Changelog\n\nIts commit adds this entry to CHANGELOG.md:"
               "\n\n```md\n" + changelog(patch) + "```\n")
  return "\n".join(parts)
