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

"""CHANGELOG.md entries merged as a maintainer merges them.

Pull requests that each add an entry to the same section of JAX's
"Unreleased" conflict in CHANGELOG.md as text, though not in meaning. The
series applies a pull request's patch without its CHANGELOG.md hunk and
then places the entry the hunk adds (:func:`entry_of`) last in its section
of the tree's own file (:func:`place`), the section made where it is
missing: what a maintainer does when resolving the conflict by hand.
"""

from __future__ import annotations

import dataclasses
import re

from jax_patch._delivery import upstream_set

CHANGELOG = "CHANGELOG.md"
# A section of a release: "* Bug fixes", "* Changes", ...
_HEADING = re.compile(r"^\* \S")
_RELEASE = re.compile(r"^## ")
_HUNK_HEADER = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


class ChangelogError(Exception):
  """A patch's CHANGELOG.md hunk is not one entry the series can place."""


@dataclasses.dataclass(frozen=True)
class Entry:
  """The lines a pull request adds to CHANGELOG.md, and where.

  Attributes:
    section: its heading (``"* Bug fixes"``) where the hunk adds the
      heading too, else ``None``: the section the lines above it are in.
    lines: the entry, without the heading and the blank lines around it.
    context: the unchanged lines just above the added ones.
  """
  section: str | None
  lines: tuple[str, ...]
  context: tuple[str, ...]


def entry_of(patch_text: str) -> Entry | None:
  """The entry a ``git format-patch`` file adds to CHANGELOG.md, if any.

  Raises:
    ChangelogError: the patch removes lines of CHANGELOG.md, or adds more
      than one block of lines.
  """
  hunks = _changelog_hunks(patch_text)
  if not hunks:
    return None
  blocks = [(context, added) for hunk in hunks
            for context, added in _added_blocks(hunk)]
  if len(blocks) != 1 or any(line.startswith("-") for hunk in hunks
                             for line in hunk):
    raise ChangelogError(
        "a pull request's CHANGELOG.md hunk must add one block of lines "
        "and remove none")
  context, added = blocks[0]
  added = _strip_blank(added)
  if added and _HEADING.match(added[0]):
    return Entry(added[0], tuple(_strip_blank(added[1:])), tuple(context))
  return Entry(None, tuple(added), tuple(context))


def place(changelog: str, entry: Entry) -> str:
  """``changelog`` with ``entry`` last in its section of the first release.

  Raises:
    ChangelogError: the file has no release heading, or the entry's
      section cannot be found from its context.
  """
  lines = changelog.splitlines()
  start = next((i for i, line in enumerate(lines) if _RELEASE.match(line)),
               None)
  if start is None:
    raise ChangelogError("CHANGELOG.md has no release heading ('## ...')")
  end = next((i for i in range(start + 1, len(lines))
              if _RELEASE.match(lines[i])), len(lines))
  headings = [i for i in range(start + 1, end) if _HEADING.match(lines[i])]
  above = _section_above(lines, start, end, entry.context)
  section = entry.section or (lines[above] if above is not None else None)
  if section is None:
    raise ChangelogError(
        "cannot tell which section of CHANGELOG.md the entry goes in: "
        + " / ".join(entry.context))
  found = [i for i in headings if lines[i] == section]
  if found:
    at = _section_end(lines, found[0], headings, end)
    new = list(entry.lines)
  else:
    # A new section goes after the one its context was in.
    at = (_section_end(lines, above, headings, end) if above is not None
          else start + 1)
    new = ["", section, *entry.lines]
  return "\n".join(lines[:at] + new + lines[at:]) + "\n"


def _changelog_hunks(patch_text: str) -> list[list[str]]:
  """The hunks of the patch's CHANGELOG.md diff, each a list of lines."""
  hunks: list[list[str]] = []
  for line in upstream_set.file_diffs(patch_text).get(CHANGELOG, []):
    if _HUNK_HEADER.match(line):
      hunks.append([])
    elif line == "-- ":
      break  # git format-patch's signature, after the last file.
    elif hunks and line[:1] in (" ", "+", "-", ""):
      hunks[-1].append(line if line else " ")
  return hunks


def _added_blocks(hunk: list[str]) -> list[tuple[list[str], list[str]]]:
  """Each run of added lines in ``hunk``, with the context just above it."""
  blocks: list[tuple[list[str], list[str]]] = []
  context: list[str] = []
  added: list[str] = []
  for line in hunk:
    if line.startswith("+"):
      added.append(line[1:])
      continue
    if added:
      blocks.append((context, added))
      context, added = [], []
    if line.startswith(" "):
      context.append(line[1:])
  if added:
    blocks.append((context, added))
  return blocks


def _strip_blank(lines: list[str]) -> list[str]:
  while lines and not lines[0].strip():
    lines = lines[1:]
  while lines and not lines[-1].strip():
    lines = lines[:-1]
  return lines


def _section_above(lines: list[str], start: int, end: int,
                   context: tuple[str, ...]) -> int | None:
  """The heading of the section ``context`` ends in, within the release.

  ``None`` where the context is the release's own heading (a section made
  first in the release).
  """
  wanted = [line for line in context if line.strip()]
  if not wanted:
    return None
  for at in range(end - 1, start - 1, -1):
    if lines[at] == wanted[-1] and _ends_with(lines[:at + 1], wanted):
      heading = next((i for i in range(at, start, -1)
                      if _HEADING.match(lines[i])), None)
      return heading
  return None


def _ends_with(lines: list[str], wanted: list[str]) -> bool:
  got = [line for line in lines if line.strip()][-len(wanted):]
  return got == wanted


def _section_end(lines: list[str], heading: int, headings: list[int],
                 end: int) -> int:
  """Where a line added last in the section at ``heading`` goes."""
  later = [i for i in headings if i > heading]
  at = later[0] if later else end
  while at > heading + 1 and not lines[at - 1].strip():
    at -= 1
  return at
