"""ringfence.workspace: the hardened path resolver, git-metadata guard, Windows
spelling rules, and the native file and search tools (see ARCHITECTURE.md).

A host uses :class:`Workspace` and :func:`register_file_tools` (the file and
search tools), and the change sets: :class:`CheckpointStore` (with its
:class:`Retention`), :class:`ChangeSet` of :class:`Change`, :func:`undo` and
:func:`register_undo_tool`. The rest (the git-metadata guard, the merge,
Windows spelling rules) stays in its private module; ringfence's own packages
import it from there.
"""

from ._file_tools import register_file_tools as register_file_tools
from ._workspace import Workspace as Workspace
from .changes._model import Change as Change, ChangeSet as ChangeSet
from .changes._store import CheckpointStore as CheckpointStore, Retention as Retention
from .changes._undo import register_undo_tool as register_undo_tool, undo as undo

__all__ = [
    "Change",
    "ChangeSet",
    "CheckpointStore",
    "Retention",
    "Workspace",
    "register_file_tools",
    "register_undo_tool",
    "undo",
]
