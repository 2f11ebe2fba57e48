"""What a pre_call hook costs: ``run_shell true`` with a hook that sees every call, against none.

Three kernels on the local backend, interleaved in one run, each ``run_shell``
of ``true`` (a new command line each call) under the ``unrestricted`` posture:

- no hook (the baseline);
- a trusted plugin's ``pre_call`` command hook (``sh``: reads the event,
  answers ``continue``), run confined like a ``sandbox = "local"`` MCP
  server: one bubblewrap sandbox and supervisor per run. Target (issue 36):
  ≤ 2x the baseline;
- a Python hook (``create_kernel(hooks=[...])``) answering ``continue``:
  informational.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ringfence import create_kernel
from ringfence.plugins._bundle import read_bundle
from ringfence.plugins._config import PluginEntry, add_entry, set_trust
from ringfence.runtime._hooks import Hook

from ._harness import Arm, interleave
from ._suite import Row, Scenario, Skip

GOAL = 2.0
_HOOK = 'cat > /dev/null\necho \'{"decision": "continue"}\'\n'
_MANIFEST = """name = "bench"
version = "1"

[[hook]]
name = "every-call"
points = ["pre_call"]
command = ["sh", "hook.sh"]
"""


def _plugin(base: Path) -> Path:
    folder = base / "plugin"
    folder.mkdir()
    (folder / "ringfence-plugin.toml").write_text(_MANIFEST)
    (folder / "hook.sh").write_text(_HOOK)
    config = base / "plugins.toml"
    add_entry(PluginEntry("bench", path=str(folder)), config)
    set_trust("bench", read_bundle(folder).sha256, config)
    return config


async def _continue(event: Any) -> None:
    return None


async def run(quick: bool) -> list[Row]:
    if shutil.which("bwrap") is None:
        raise Skip("bubblewrap is not installed (apt-get install bubblewrap)")
    rounds, batch = (6, 5) if quick else (20, 10)
    counter = itertools.count()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = base / "ws"
        root.mkdir()
        config = _plugin(base)
        common: dict[str, Any] = {"roots": [root], "backend": "local", "posture": "unrestricted"}
        async with (
            create_kernel(**common) as plain,
            create_kernel(**common, plugins=config) as hooked,
            create_kernel(**common, hooks=[Hook("continue", _continue)]) as python,
        ):

            def call(kernel: Any) -> Any:
                async def one() -> object:
                    return await kernel.call("run_shell", {"command": f"true {next(counter)}"})

                return one

            s = await interleave(
                [
                    Arm("run_shell true", call(plain), batch),
                    Arm("run_shell true, command hook", call(hooked), batch),
                    Arm("run_shell true, Python hook", call(python), batch),
                ],
                rounds=rounds,
                warmup=1,
            )
    base_s = s["run_shell true"]
    command, py = s["run_shell true, command hook"], s["run_shell true, Python hook"]
    ratio = command.median / base_s.median
    return [
        Row(
            "hooks",
            "run_shell true with a confined pre_call command hook (sh, continue)",
            command,
            base_s,
            f"≤ {GOAL:g}x run_shell true (target)",
            ratio <= GOAL,
            {
                "added_s": command.median - base_s.median,
                "note": "each hook run starts a bubblewrap sandbox and its supervisor",
            },
        ),
        Row(
            "hooks",
            "run_shell true with a Python pre_call hook (continue)",
            py,
            base_s,
            "informational",
            None,
            {"added_s": py.median - base_s.median},
        ),
    ]


SCENARIO = Scenario(
    "hooks",
    "pre_call hooks: a confined command hook and a Python hook on run_shell true",
    f"command hook ≤ {GOAL:g}x run_shell true (target)",
    run,
)
