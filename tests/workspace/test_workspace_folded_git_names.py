"""The names git's discovery reads, in the spellings a case-insensitive file system answers to.

git asks the kernel for ``HEAD`` and ``access("objects", X_OK)``. On vfat, exFAT, NTFS, an SMB
share, a casefolded ext4/f2fs/tmpfs directory or XFS ``ascii-ci``, the entry ``OBJECTS`` (or
``Objects``, ``object\\u017f`` with a long s, ``objects.`` on vfat) is the one that answers. A writer
that compared the name it adds with ``objects`` byte for byte let ``write_file
d/OBJECTS/x`` complete ``d`` (a ``HEAD`` and ``refs/`` already there) into a repository whose
``config`` the agent had written while ``d`` was an ordinary directory: the person's ``git log``
there ran its ``core.pager``. This machine's kernel has no case-insensitive file system to
show git's side (no casefold, no ``ascii-ci``, no vfat), so these tests hold the judgment:
such a name is refused as ``objects`` is, through the kernel's own ``write_file``, and nothing
is written.
"""

from __future__ import annotations

import pytest
from workspace_helpers import Tree, snapshot

from ringfence._embed import create_kernel
from ringfence.workspace.git._walk import may_be_git_dir

HEAD = "ref: refs/heads/main\n"
PAGER = '[core]\n\tbare = true\n\tpager = "touch /tmp/rf-pwned-pager"\n'


@pytest.mark.parametrize(
    ("present", "added"),
    [
        (["HEAD", "refs/keep"], "OBJECTS/x"),
        (["HEAD", "refs/keep"], "Objects/x"),
        (["HEAD", "refs/keep"], "objects./x"),
        (["HEAD", "refs/keep"], "object\u017f/x"),  # long s: casefolds to s
        (["HEAD", "objects/keep"], "REFS/x"),
        (["HEAD", "objects/keep"], "ref\u017f/x"),
        (["HEAD"], "COMMONDIR"),
        (["objects/keep", "refs/keep"], "Head"),
        (["objects/keep", "refs/keep"], "HEAD."),
        (["objects/keep", "refs/keep"], "\u0068ead\u200c"),  # an HFS+ ignorable at the end
    ],
)
async def test_a_repository_completed_by_a_case_variant_of_a_git_name_is_refused(
    tree: Tree, present: list[str], added: str
) -> None:
    """Each piece but the last written under its own name, the config among them; the last
    in another case: refused (``git_metadata``), nothing written, the config left inert."""
    async with create_kernel(roots=[tree.ws], posture="allow-all") as kernel:
        for rel in [*present, "config"]:
            content = HEAD if rel == "HEAD" else PAGER if rel == "config" else "x\n"
            out = await kernel.invoke("write_file", {"path": f"d/{rel}", "content": content})
            assert out.ok, out.error
        before = snapshot(tree.ws)
        content = HEAD if added.lower().startswith("head") else "x\n"
        out = await kernel.invoke("write_file", {"path": f"d/{added}", "content": content})
    assert out.error is not None
    assert out.error.code == "git_metadata", out.error
    assert "would make" in out.error.message
    assert snapshot(tree.ws) == before


async def test_a_case_variant_in_another_directory_is_written(tree: Tree) -> None:
    """Only a name that completes its own directory is refused: ``OBJECTS`` beside no
    ``HEAD`` is an ordinary directory, in any case."""
    async with create_kernel(roots=[tree.ws], posture="allow-all") as kernel:
        out = await kernel.invoke("write_file", {"path": "src/OBJECTS/x", "content": "x\n"})
        assert out.ok, out.error
        out = await kernel.invoke("write_file", {"path": "src/Head.java", "content": "x\n"})
        assert out.ok, out.error
    assert (tree.ws / "src" / "OBJECTS" / "x").read_text() == "x\n"


def test_the_scan_takes_a_case_variant_directory_for_a_candidate() -> None:
    """The scan around a ``--no-change-sets`` command (and the merge's candidates) looks at a
    directory named so with git's own test, which a case-insensitive kernel answers."""
    from ringfence.workspace.git._rules import git_discovery_name

    assert may_be_git_dir({"head", "OBJECTS", "Refs"})
    assert may_be_git_dir({"HEAD.", "commondir"})
    assert not may_be_git_dir({"head.txt", "objects", "refs"})
    assert git_discovery_name("\u017f") is None
    assert git_discovery_name("K") is None
    assert git_discovery_name("HEAD.quarantined") is None
    assert git_discovery_name("refs") == "refs"
