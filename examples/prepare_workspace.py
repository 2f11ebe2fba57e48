"""Copy the example project to a fresh demo workspace with a real git repository in it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

source = Path(__file__).parent / "workspace"
target = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-workspace")
shutil.rmtree(target, ignore_errors=True)
shutil.copytree(source, target)
if shutil.which("git"):
    subprocess.run(["git", "init", "-q", str(target)], check=True)
else:  # the demo still shows the guard: git's own layout, made by hand
    for name in ("objects", "refs", "hooks"):
        (target / ".git" / name).mkdir(parents=True)
    (target / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (target / ".git" / "config").write_text("[core]\n")
print(f"demo workspace ready: {target}/")
