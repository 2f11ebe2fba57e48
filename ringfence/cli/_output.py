"""How every verb prints results and maps errors to exit codes.

Exit codes: 0 ok, 1 tool error or refusal by the tool, 2 usage error,
3 denied by policy or approver.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..runtime import Denied, InvalidArguments, RingfenceError

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
EXIT_USAGE = 2
EXIT_DENIED = 3


class UsageError(Exception):
    """A command-line mistake: printed without a traceback, exit 2."""


def exit_code_for(error: RingfenceError) -> int:
    if isinstance(error, Denied):
        return EXIT_DENIED
    if isinstance(error, InvalidArguments):
        return EXIT_USAGE
    return EXIT_TOOL_ERROR


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=2, default=str) + "\n")


def print_ok(result: Any, as_json: bool) -> int:
    if as_json:
        print_json({"ok": True, "result": result})
    elif isinstance(result, str):
        sys.stdout.write(result if result.endswith("\n") or not result else result + "\n")
    else:
        print_json(result)
    return EXIT_OK


def print_error(error: RingfenceError, as_json: bool) -> int:
    if as_json:
        print_json({"ok": False, "error": error.to_dict()})
    else:
        sys.stderr.write(f"ringfence: {error.code}: {error.message}\n")
    return exit_code_for(error)
