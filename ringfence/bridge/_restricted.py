"""The language layer: a script compiled and run as restricted Python.

Imported by the runner (``_runner``) as a top-level module from its own
directory, like ``_wire`` and ``_sandbox``; it needs the standard library,
RestrictedPython (imported by the runner from its own directory, never put on
``sys.path``) and its sibling ``_allowlist``.

The language layer (restricted mode) holds on its own, whatever the sandbox
level: RestrictedPython's compile-time checks and guarded attribute access,
plus the runner's own rules. Builtins and module names are allowlists
(``ALLOWED_NAMES`` in ``_allowlist``): nothing a script can reach evaluates a
string it supplies as code, resolves an attribute name it supplies without the
guard, or writes attributes behind the write guard's back (``WITHHELD_NAMES``
says what was left out and why). Annotations are dropped at compile time.
Attributes whose name starts with ``_`` can be neither read nor written
(``setattr``/``delattr`` included), so a script class cannot get new dunder
methods or a new ``__class__``; only the script's own classes and their
instances can be written to at all. Not promised: resource use (CPU, memory,
output) is bounded by the OS layer and the host, not here; and the guarantee is
only as good as RestrictedPython's checks for the running CPython version.
"""

from __future__ import annotations

import os
from typing import Any

from . import _allowlist

SCRIPT_FILENAME = "<script>"


class ToolError(Exception):
    """Raised by ``call_tool``, ``tools.<name>(...)`` and ``parallel`` when a call failed.

    ``code`` is ringfence's error code (``denied``, ``not_found``,
    ``invalid_arguments``, ``outside_workspace``, ``tool_error``, …),
    ``message`` says why, ``field`` names the argument at fault (or None),
    ``tool`` the tool, and ``decision`` is the Gate's decision (``{verdict,
    rule, reason}``) or None (the call never reached the Gate). Raised by
    ``parallel``, ``results`` holds every call's value or ToolError, in order.
    """

    def __init__(
        self,
        code: str,
        message: str,
        tool: str = "",
        decision: Any = None,
        field: str | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.tool = tool
        self.decision = decision
        self.field = field
        self.results: list[Any] | None = None


class _Printer:
    """RestrictedPython's ``_print_`` protocol, writing through to stdout at once.

    Unbuffered on purpose: when a run is killed (timeout, CPU limit) the host
    still has everything printed before. ``print(file=...)`` is refused; the
    ``printed`` variable of RestrictedPython is not supported.
    """

    def __init__(self, _getattr_: Any = None) -> None:
        pass

    def _call_print(self, *objects: Any, sep: Any = " ", end: Any = "\n", **kw: Any) -> None:
        if kw.get("file") is not None:
            raise TypeError(
                "print(file=...) is not available in a script; output goes to the result"
            )
        if sep is None:
            sep = " "
        if end is None:
            end = "\n"
        if not isinstance(sep, str) or not isinstance(end, str):
            raise TypeError("print: sep and end must be strings")
        _write_out((sep.join(map(str, objects)) + end).encode("utf-8", "surrogateescape"))

    def __call__(self) -> str:
        raise NotImplementedError("'printed' is not supported; set a variable named result")


def _write_out(data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


# Dunder names a class body may hold: what Python itself puts there, and the
# methods RestrictedPython lets a script define.
_CLASS_DUNDERS = frozenset(
    {
        "__module__", "__qualname__", "__doc__", "__classcell__",
        "__firstlineno__", "__static_attributes__",  # Python >= 3.13
    }
)  # fmt: skip


def _check_write_name(name: Any, action: str) -> None:
    """Refuse attribute writes by name that compiled code could not spell."""
    if type(name) is not str:  # a str subclass could lie in startswith/__eq__
        raise TypeError(f"{action}: the attribute name must be a str")
    if name.startswith("_"):
        raise AttributeError(
            f'{action}: "{name}" cannot be changed in a script (names starting with "_" '
            "are reserved: dunder methods, __class__, __dict__)"
        )


def restricted_globals(
    call_tool: Any, modules: Any = None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The globals a restricted script runs with (RestrictedPython's guards plus ours).

    ``extra``: further builtins the runner provides (``tools``, ``parallel``).
    """
    import builtins
    import operator

    from RestrictedPython.Guards import (
        full_write_guard,
        guarded_delattr,
        guarded_iter_unpack_sequence,
        guarded_setattr,
        guarded_unpack_sequence,
        safe_builtins,
        safer_getattr_raise,
    )
    from RestrictedPython.transformer import ALLOWED_FUNC_NAMES

    modules = modules if modules is not None else _allowlist.ModuleCopies()

    def hasattr_(obj: Any, name: str) -> bool:
        try:
            safer_getattr_raise(obj, name)
        except AttributeError:
            return False
        return True

    inplace = {
        "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
        "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow,
        "<<=": operator.ilshift, ">>=": operator.irshift, "|=": operator.ior,
        "^=": operator.ixor, "&=": operator.iand, "@=": operator.imatmul,
    }  # fmt: skip

    def inplacevar(op: str, x: Any, y: Any) -> Any:
        return inplace[op](x, y)

    def setattr_(obj: Any, name: str, value: Any) -> None:
        _check_write_name(name, "setattr")
        guarded_setattr(obj, name, value)

    def delattr_(obj: Any, name: str) -> None:
        _check_write_name(name, "delattr")
        guarded_delattr(obj, name)

    class_dunders = _CLASS_DUNDERS | ALLOWED_FUNC_NAMES

    def metaclass(name: str, bases: tuple[Any, ...], ns: dict[str, Any]) -> type:
        # Instances of the script's own classes may be written to (full_write_guard
        # lets objects with _guarded_writes through); nothing else may. The
        # compiler already refuses other "_" names in a class body; checked again
        # here because this is where a class gets its dunder methods.
        odd = sorted(k for k in ns if k.startswith("_") and k not in class_dunders)
        if odd:
            raise TypeError(f"class {name}: {', '.join(odd)} cannot be set in a script")
        ns["_guarded_writes"] = True
        return type(name, bases, ns)

    # RestrictedPython's limited_builtins (range capped at 1000 items, no list("abc"))
    # are left out on purpose: memory and CPU are bounded by the OS layer instead.
    safe = dict(safe_builtins)
    for name in (
        "all", "any", "bytearray", "dict", "enumerate", "filter", "format", "frozenset", "iter",
        "list", "map", "max", "min", "next", "range", "reversed", "set", "sorted", "sum", "tuple",
        "zip",
        "StopAsyncIteration",
    ):  # fmt: skip
        safe[name] = getattr(builtins, name)
    safe.update(
        __import__=_allowlist.import_guard(modules),
        getattr=safer_getattr_raise,
        hasattr=hasattr_,
        setattr=setattr_,
        delattr=delattr_,
        call_tool=call_tool,
        ToolError=ToolError,
        **(extra or {}),
    )
    return {
        "__builtins__": safe,
        "__name__": "__script__",
        "__metaclass__": metaclass,
        "_getattr_": safer_getattr_raise,
        "_getitem_": operator.getitem,
        "_getiter_": iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": full_write_guard,
        "_inplacevar_": inplacevar,
        "_apply_": lambda f, *a, **kw: f(*a, **kw),
        "_print_": _Printer,
    }


def compile_script(source: str) -> tuple[list[str], Any]:
    """Compile restricted source: ``(errors, code)``, code None when there are errors.

    On top of RestrictedPython's checks: annotations are dropped (library code
    such as ``typing.get_type_hints`` evaluates string annotations as
    unrestricted Python; a script cannot read them anyway), and ``from
    __future__`` imports are refused (``annotations`` would turn every
    annotation into such a string). Errors Python's own compiler raises after
    parsing (``return`` outside a function, a misplaced future import) are
    reported like the others instead of ending the runner.
    """
    from RestrictedPython import RestrictingNodeTransformer, compile_restricted_exec

    class ScriptPolicy(RestrictingNodeTransformer):
        def visit_arg(self, node: Any) -> Any:
            node.annotation = None
            return super().visit_arg(node)

        def visit_FunctionDef(self, node: Any) -> Any:
            node.returns = None
            return super().visit_FunctionDef(node)

        def visit_ImportFrom(self, node: Any) -> Any:
            if node.module == "__future__":
                self.error(node, "from __future__ imports are not available in a script")
            return super().visit_ImportFrom(node)

    try:
        compiled = compile_restricted_exec(source, filename=SCRIPT_FILENAME, policy=ScriptPolicy)
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        return [f"Line {line}: {getattr(exc, 'msg', None) or exc}"], None
    except (RecursionError, MemoryError) as exc:
        return [too_complex(exc)], None
    if compiled.errors or compiled.code is None:
        return list(compiled.errors), None
    return [], compiled.code


def too_complex(exc: BaseException) -> str:
    """The compile error of a script whose syntax tree is too deep or too large to compile
    (``-`` * 2000 + ``1``, ``1+1+…+1``): RestrictedPython's transformer and CPython's
    compiler recurse on it. Until 2026-12-07 a 2 KB script ended the runner, and its
    traceback (this host's paths) was the tool's error message."""
    if isinstance(exc, MemoryError):
        why = "needs more memory to compile than a run may use (ScriptConfig.limits.memory_bytes)"
    else:
        why = "nests too deeply to compile (Python's recursion limit)"
    return f"the script {why}; split long expressions into statements"


def plain_globals(call_tool: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Unrestricted Python inside the OS sandbox: only for testing the OS layers alone."""
    printer = _Printer()

    def print_(*objects: Any, **kw: Any) -> None:
        kw.pop("flush", None)
        printer._call_print(*objects, **kw)

    return {
        "__name__": "__script__",
        "call_tool": call_tool,
        "ToolError": ToolError,
        "print": print_,
        **(extra or {}),
    }
