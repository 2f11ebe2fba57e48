"""The script runner starts through ``ringfence._confine.boot``: nothing planted is imported.

The runner's argv (``LocalLauncher.runner_argv``) runs in a working directory that
holds modules named like the runner's own, its siblings, the Linux primitives'
package, the top package and a standard library module: none of them may load
(``-I`` puts nothing on ``sys.path``, and ringfence's modules come from the
package's own directories); the runner fails on its empty boot JSON with a
traceback naming its real file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from ringfence.bridge._launch import RUNNER_PATH, LocalLauncher

PLANTED = "import os\nos.write(1, b'PLANTED')\n"


def test_the_runner_boot_imports_only_the_package_s_own_modules(tmp_path: Path) -> None:
    for name in ("_runner", "_sandbox", "_wire", "_allowlist", "_restricted", "_confine"):
        (tmp_path / f"{name}.py").write_text(PLANTED)
    for name in ("ctypes", "json", "socket", "ringfence"):
        (tmp_path / f"{name}.py").write_text(PLANTED)
    (tmp_path / "ringfence" / "_confine").mkdir(parents=True)
    for name in ("__init__", "_confine/__init__", "_confine/landlock", "_confine/seccomp"):
        (tmp_path / "ringfence" / f"{name}.py").write_text(PLANTED)
    out = subprocess.run(
        LocalLauncher().runner_argv("{}"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "PLANTED" not in out.stdout + out.stderr
    assert out.returncode == 1
    assert str(RUNNER_PATH) in out.stderr  # the traceback is the package's own file


class _PlantedSite(LocalLauncher):
    """A launcher whose RestrictedPython directory also holds planted standard-library names:
    the kernel's site-packages when it is a directory the agent can write (a project's
    ``.venv`` inside the workspace)."""

    def __init__(self, site: Path) -> None:
        super().__init__()
        self.site = site

    def sys_path(self) -> list[str]:
        return [str(self.site)]


async def test_modules_planted_beside_restricted_python_never_load(tmp_path: Path) -> None:
    """Until 2026-12-07 the runner prepended RestrictedPython's directory to ``sys.path``:
    a ``platform.py`` (RestrictedPython imports it) or ``statistics.py`` (a script's import)
    planted there ran in the runner before its sandbox, with the bridge secret in memory."""
    import RestrictedPython
    from bridge_helpers import run

    from ringfence.bridge._allowlist import ALLOWED_NAMES
    from ringfence.runtime import Kernel, Posture

    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "RestrictedPython").symlink_to(Path(RestrictedPython.__file__).resolve().parent)
    marker = tmp_path / "planted-ran"
    names = {*ALLOWED_NAMES, "platform", "warnings", "operator", "ast", "random", "textwrap"}
    for name in sorted(names):
        (site / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r} + ' ')\n")
    source = "import statistics\nimport textwrap\nresult = statistics.mean([1, 2, 3])"
    async with Kernel(posture=Posture.UNRESTRICTED) as kernel:
        result = await run(kernel, source, launcher=_PlantedSite(site), timeout=60)
    assert not marker.exists(), marker.read_text()
    assert result.status == "ok", result
    assert result.result == 2
