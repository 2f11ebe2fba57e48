"""ringfence.workspace: the hardened path resolver, git-metadata guard, Windows
spelling rules, and the native file and search tools (see ARCHITECTURE.md).

Other packages use :class:`Workspace` (``resolve_dir`` for a shell's working
directory, ``git_directories`` for read-only mounts), :func:`register_file_tools`,
and :func:`scan_git_metadata` / :func:`enforce_git_metadata` (``run_shell``'s check
that a command left no new or changed git metadata).
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._file_tools import (
    file_tool_specs as file_tool_specs,
    register_file_tools as register_file_tools,
)
from ._resolver import openat2_available as openat2_available
from ._workspace import Workspace as Workspace
from .changes._model import Change as Change, ChangeSet as ChangeSet, Image as Image
from .changes._store import (
    CheckpointStore as CheckpointStore,
    Retention as Retention,
    workspace_id as workspace_id,
)
from .changes._undo import (
    apply_change_set as apply_change_set,
    register_undo_tool as register_undo_tool,
    undo as undo,
)
from .git._rules import (
    is_dotgit as is_dotgit,
    is_dotgitmodules as is_dotgitmodules,
    is_git_directory as is_git_directory,
    is_hfs_dotgit as is_hfs_dotgit,
    is_ntfs_dotgit as is_ntfs_dotgit,
)

if TYPE_CHECKING:
    from ._windows import (
        WindowsFileSystem as WindowsFileSystem,
        WindowsPath as WindowsPath,
        resolve_windows_path as resolve_windows_path,
    )
    from .changes._merge import MergeReport as MergeReport, merge_changes as merge_changes
    from .changes._upper import changes_from_upper as changes_from_upper
    from .git._enforce import (
        diff_git_metadata as diff_git_metadata,
        enforce_git_metadata as enforce_git_metadata,
    )
    from .git._scan import scan_git_metadata as scan_git_metadata
    from .git._snapshot import (
        GitReport as GitReport,
        GitSnapshot as GitSnapshot,
        describe_findings as describe_findings,
    )

# What only some sessions use loads on first use (PEP 562): run_shell's git check, the
# change-set merge (undo, overlays), overlay uppers and Windows spelling rules.
_LAZY = {
    "GitReport": ".git._snapshot",
    "GitSnapshot": ".git._snapshot",
    "describe_findings": ".git._snapshot",
    "diff_git_metadata": ".git._enforce",
    "enforce_git_metadata": ".git._enforce",
    "scan_git_metadata": ".git._scan",
    "MergeReport": ".changes._merge",
    "merge_changes": ".changes._merge",
    "changes_from_upper": ".changes._upper",
    "WindowsFileSystem": "._windows",
    "WindowsPath": "._windows",
    "resolve_windows_path": "._windows",
}

__all__ = [
    "Change",
    "ChangeSet",
    "CheckpointStore",
    "GitReport",
    "GitSnapshot",
    "Image",
    "MergeReport",
    "Retention",
    "WindowsFileSystem",
    "WindowsPath",
    "Workspace",
    "apply_change_set",
    "changes_from_upper",
    "describe_findings",
    "diff_git_metadata",
    "enforce_git_metadata",
    "file_tool_specs",
    "is_dotgit",
    "is_dotgitmodules",
    "is_git_directory",
    "is_hfs_dotgit",
    "is_ntfs_dotgit",
    "merge_changes",
    "openat2_available",
    "register_file_tools",
    "register_undo_tool",
    "resolve_windows_path",
    "scan_git_metadata",
    "undo",
    "workspace_id",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
