"""The script runner: the child process of one ``run_tool_script`` call.

Executed as a file, ``python -I -S <this file> <boot JSON>``, so that it needs
nothing from the environment, from ``site`` or from an installed ``ringfence``
(the same file runs inside a container, reached over a Unix socket). Its
siblings ``_wire`` and ``_sandbox`` are imported as top-level modules from this
file's directory; RestrictedPython's directory comes in ``boot["sys_path"]``.

The order of work, and why:

1. arm ``PR_SET_PDEATHSIG`` and check the parent is still the host, so a host
   that dies from here on takes the child with it;
2. import everything the script may use (RestrictedPython, the allowed
   modules): after the sandbox there may be no filesystem access left to
   import with;
3. read the per-run secret and the run's config from the inherited pipe
   (``boot["secret_fd"]``) until the host closes it: the secret is never in
   argv or the environment. A *spare* runner, started ahead of need, waits
   here; an empty pipe means it was not needed, and it exits;
4. connect to the bridge and run the handshake (``_wire``);
5. apply the OS sandbox (``_sandbox.apply``, which also starts the watchdog
   thread that exits when the host's end of the bridge closes) and report it;
6. only then receive the script, compile it with RestrictedPython, and run it
   with ``call_tool``, ``ToolError`` and a ``print`` that writes straight to
   stdout (a pipe the host reads, so output survives a kill);
7. report the outcome: ``result`` (the value of a top-level variable named
   ``result``, if the script set one) or the error with a traceback in script
   line numbers.

The language layer (restricted mode) holds on its own, whatever the sandbox
level: RestrictedPython's compile-time checks and guarded attribute access,
plus the runner's own rules. Builtins and module names are allowlists
(``ALLOWED_NAMES``): nothing a script can reach evaluates a string it supplies
as code, resolves an attribute name it supplies without the guard, or writes
attributes behind the write guard's back (``WITHHELD_NAMES`` says what was
left out and why). Annotations are dropped at compile time. Attributes whose
name starts with ``_`` can be neither read nor written (``setattr``/``delattr``
included), so a script class cannot get new dunder methods or a new
``__class__``; only the script's own classes and their instances can be
written to at all. Not promised: resource use (CPU, memory, output) is bounded
by the OS layer and the host, not here; and the guarantee is only as good as
RestrictedPython's checks for the running CPython version.

Exit codes: 0 the script ran (it may have raised; that is in the report),
3 the sandbox could not be applied, 4 protocol or bridge failure, 70 the host
was already gone.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # executed as a file: make the sibling modules importable
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    from . import _sandbox, _wire
except ImportError:  # executed as a file (no parent package)
    import _sandbox  # type: ignore[no-redef]
    import _wire  # type: ignore[no-redef]

import json
import socket
import types
from typing import Any

# What ``import`` may name inside a script, and the names each module copy holds.
# An allowlist: every name was reviewed for ways around RestrictedPython's guards
# (a name that evaluates a script-supplied string as code, resolves a
# script-supplied attribute name, or writes attributes behind the write guard's
# back is left out). A name added here needs the same review, and a line in
# tests/bridge/test_bridge_escapes.py if it comes close to one of those.
ALLOWED_NAMES: dict[str, tuple[str, ...]] = {
    "base64": (
        "a85decode", "a85encode", "b16decode", "b16encode", "b32decode", "b32encode",
        "b32hexdecode", "b32hexencode", "b64decode", "b64encode", "b85decode", "b85encode",
        "decode", "decodebytes", "encode", "encodebytes", "standard_b64decode",
        "standard_b64encode", "urlsafe_b64decode", "urlsafe_b64encode",
    ),
    # namedtuple builds its class with eval(), but only from field and type names it
    # has checked to be identifiers that are not keywords and do not start with "_".
    "collections": (
        "ChainMap", "Counter", "OrderedDict", "UserDict", "UserList", "defaultdict", "deque",
        "namedtuple",
    ),
    "csv": (
        "Dialect", "DictReader", "DictWriter", "Error", "QUOTE_ALL", "QUOTE_MINIMAL",
        "QUOTE_NONE", "QUOTE_NONNUMERIC", "Sniffer", "excel", "excel_tab", "field_size_limit",
        "get_dialect", "list_dialects", "reader", "register_dialect", "unix_dialect",
        "unregister_dialect", "writer",
    ),
    "datetime": (
        "MAXYEAR", "MINYEAR", "UTC", "date", "datetime", "time", "timedelta", "timezone",
        "tzinfo",
    ),
    # total_ordering is replaced by a version that accepts the script's own classes only.
    "functools": (
        "cache", "cached_property", "cmp_to_key", "lru_cache", "partial", "partialmethod",
        "reduce", "total_ordering",
    ),
    "hashlib": (
        "algorithms_available", "algorithms_guaranteed", "blake2b", "blake2s", "file_digest",
        "md5", "new", "pbkdf2_hmac", "sha1", "sha224", "sha256", "sha384", "sha3_224",
        "sha3_256", "sha3_384", "sha3_512", "sha512", "shake_128", "shake_256",
    ),
    "itertools": (
        "accumulate", "chain", "combinations", "combinations_with_replacement", "compress",
        "count", "cycle", "dropwhile", "filterfalse", "groupby", "islice", "pairwise",
        "permutations", "product", "repeat", "starmap", "takewhile", "tee", "zip_longest",
    ),
    # The hooks (object_hook, default, cls, ...) are called with data only, and a
    # script can hand them only what it already holds: nothing unguarded.
    "json": ("JSONDecodeError", "JSONDecoder", "JSONEncoder", "dump", "dumps", "load", "loads"),
    "math": (
        "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "comb",
        "copysign", "cos", "cosh", "degrees", "dist", "e", "erf", "erfc", "exp", "exp2",
        "expm1", "fabs", "factorial", "floor", "fmod", "frexp", "fsum", "gamma", "gcd", "hypot",
        "inf", "isclose", "isfinite", "isinf", "isnan", "isqrt", "lcm", "ldexp", "lgamma", "log",
        "log10", "log1p", "log2", "modf", "nan", "nextafter", "perm", "pi", "pow", "prod",
        "radians", "remainder", "sin", "sinh", "sqrt", "tan", "tanh", "tau", "trunc", "ulp",
    ),
    # Replacement templates (sub, expand) name groups only, never attributes.
    "re": (
        "A", "ASCII", "DOTALL", "I", "IGNORECASE", "L", "LOCALE", "M", "MULTILINE", "Match",
        "NOFLAG", "Pattern", "S", "U", "UNICODE", "VERBOSE", "X", "compile", "error", "escape",
        "findall", "finditer", "fullmatch", "match", "purge", "search", "split", "sub", "subn",
    ),
    "statistics": (
        "NormalDist", "StatisticsError", "correlation", "covariance", "fmean", "geometric_mean",
        "harmonic_mean", "linear_regression", "mean", "median", "median_grouped", "median_high",
        "median_low", "mode", "multimode", "pstdev", "pvariance", "quantiles", "stdev",
        "variance",
    ),
    # Template substitutes by mapping[name], never by attribute.
    "string": (
        "Template", "ascii_letters", "ascii_lowercase", "ascii_uppercase", "capwords", "digits",
        "hexdigits", "octdigits", "printable", "punctuation", "whitespace",
    ),
    "textwrap": ("TextWrapper", "dedent", "fill", "indent", "shorten", "wrap"),
    # Also what datetime's C code imports for strftime(): it imports through the
    # script's __import__. Left out: clock_settime*, tzset (they change state).
    "time": (
        "altzone", "asctime", "ctime", "daylight", "gmtime", "localtime", "mktime",
        "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "process_time",
        "process_time_ns", "sleep", "strftime", "strptime", "struct_time", "time", "time_ns",
        "timezone", "tzname",
    ),
}  # fmt: skip
ALLOWED_MODULES = tuple(ALLOWED_NAMES)
# Names left out because each is a way around the guards; a script that asks for
# one is told why.
WITHHELD_NAMES: dict[str, dict[str, str]] = {
    "functools": {
        "singledispatch": "its register() evaluates string annotations as unrestricted Python",
        "singledispatchmethod": "its register() evaluates string annotations as unrestricted "
        "Python",
        "update_wrapper": "it sets arbitrary attributes (such as __code__) without the write guard",
        "wraps": "it sets arbitrary attributes (such as __code__) without the write guard",
    },
    "string": {"Formatter": 'it resolves attribute names such as "{0.__class__}"'},
    "collections": {
        "UserString": 'its format() and format_map() resolve attribute names such as "{0.__class__}"'
    },
}
# Modules the allowed ones import lazily; loaded up front for the same reason.
_INTERNAL = frozenset({"_strptime"})
_LAZY = ("_strptime", "heapq", "copy", "encodings.latin_1", "encodings.ascii", "encodings.utf_16")

SCRIPT_FILENAME = "<script>"
EXIT_SANDBOX = 3
EXIT_BRIDGE = 4


class ToolError(Exception):
    """Raised by ``call_tool`` when the Gate refused the call or the tool failed.

    ``code`` is ringfence's error code (``denied``, ``not_found``,
    ``invalid_arguments``, ``tool_error``, …), ``message`` says why, and
    ``decision`` is the Gate's decision (``{verdict, rule, reason}``) or None.
    """

    def __init__(self, code: str, message: str, tool: str = "", decision: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.tool = tool
        self.decision = decision


class Channel:
    """A blocking, framed, sequenced connection to the host (the child's side)."""

    def __init__(self, sock: socket.socket, max_frame: int) -> None:
        self.sock = sock
        self.codec = _wire.Codec(_wire.TO_HOST, _wire.TO_CHILD, max_frame)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(self.codec.encode(message))

    def recv(self) -> dict[str, Any]:
        while (message := self.codec.next_message()) is None:
            data = self.sock.recv(max(65536, self.codec.missing))
            if not data:
                raise _wire.ProtocolError("closed", "the host closed the bridge")
            self.codec.receive_data(data)
        return message

    def handshake(self, secret: bytes) -> None:
        nc = _wire.new_nonce()
        self.send({"type": "hello", "protocol": _wire.PROTOCOL, "nonce": nc.hex()})
        challenge = self.codec.expect(self.recv(), "challenge")
        nh = _wire.decode_nonce(challenge.get("nonce"))
        _wire.check_proof(_wire.host_proof(secret, nc, nh), challenge.get("proof"))
        self.send({"type": "auth", "proof": _wire.child_proof(secret, nc, nh).hex()})
        self.codec.key = _wire.session_key(secret, nc, nh)
        self.codec.expect(self.recv(), "welcome")


def _connect(where: list[Any]) -> socket.socket:
    if where[0] == "tcp":
        sock = socket.create_connection((where[1], int(where[2])))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    if where[0] == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(where[1])
        return sock
    raise ValueError(f"unknown bridge transport {where[0]!r}")


def _read_activation(fd: int) -> tuple[bytes, dict[str, Any]] | None:
    """The secret and the run's config from the inherited pipe; None when it closed empty."""
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    data = b"".join(chunks)
    if not data:
        return None  # a spare runner that was never needed
    secret, rest = data[: _wire.SECRET_BYTES], data[_wire.SECRET_BYTES :]
    if len(secret) != _wire.SECRET_BYTES:
        raise _wire.ProtocolError("malformed", "the secret pipe did not hold a bridge secret")
    return secret, json.loads(rest)


# -- what the script sees ---------------------------------------------------------------


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


def _not_available(module: str, name: str) -> str:
    why = WITHHELD_NAMES.get(module, {}).get(name)
    if why:
        return f"{module}.{name} is not available in a script: {why}"
    return f"module {module!r} has no attribute {name!r} available to scripts"


class _ScriptModule(types.ModuleType):
    """What a script gets for an allowed module: the allowlisted names only.

    Read-only to the script (RestrictedPython's write guard refuses modules). A
    name left out raises AttributeError saying why.
    """

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(_not_available(self.__name__, name))


def _script_total_ordering(cls: Any) -> Any:
    """functools.total_ordering for the script's own classes only (it sets dunder methods)."""
    import functools

    if not (isinstance(cls, type) and hasattr(cls, "_guarded_writes")):
        raise TypeError("functools.total_ordering takes a class defined in the script")
    return functools.total_ordering(cls)


_REPLACED = {("functools", "total_ordering"): _script_total_ordering}


_ABSENT = object()


def _module_copy(name: str) -> _ScriptModule:
    real = sys.modules[name]
    copy = _ScriptModule(name)
    for attr in ALLOWED_NAMES[name]:
        value = _REPLACED.get((name, attr)) or getattr(real, attr, _ABSENT)
        if value is _ABSENT:
            continue  # an older Python (in a container) lacks it
        if isinstance(value, (set, frozenset)):
            value = frozenset(value)  # not the module's own set: nothing shared to mutate
        elif isinstance(value, (list, dict, bytearray, types.ModuleType)):
            raise TypeError(f"{name}.{attr} is mutable or a module: not for a script")
        setattr(copy, attr, value)
    return copy


def module_copies() -> dict[str, Any]:
    """The allowed modules as the script sees them; made once, before the run is known."""
    return {name: _module_copy(name) for name in ALLOWED_MODULES}


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


def restricted_globals(call_tool: Any, modules: dict[str, Any] | None = None) -> dict[str, Any]:
    """The globals a restricted script runs with (RestrictedPython's guards plus ours)."""
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

    modules = modules if modules is not None else module_copies()

    def guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:  # fmt: skip
        if level == 0 and name in _INTERNAL and name in sys.modules:
            # C code (datetime.strptime → _strptime) imports through the calling
            # frame's __import__, i.e. this one; script source cannot spell "_" names.
            return sys.modules[name]
        if level != 0 or name not in modules:
            raise ImportError(
                f"import of {name!r} is not allowed in a script; "
                f"allowed modules: {', '.join(ALLOWED_MODULES)}"
            )
        module = modules[name]
        for attr in fromlist or ():
            if not hasattr(module, attr):  # say why, not just "cannot import name"
                raise ImportError(_not_available(name, attr))
        return module

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
        __import__=guarded_import,
        getattr=safer_getattr_raise,
        hasattr=hasattr_,
        setattr=setattr_,
        delattr=delattr_,
        call_tool=call_tool,
        ToolError=ToolError,
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
    if compiled.errors or compiled.code is None:
        return list(compiled.errors), None
    return [], compiled.code


def plain_globals(call_tool: Any) -> dict[str, Any]:
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
    }


def _traceback(exc: BaseException, source: str) -> dict[str, Any]:
    """The error as script lines only: the runner's own frames are left out."""
    lines = source.splitlines()
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename == SCRIPT_FILENAME:
            frames.append((tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.filename == SCRIPT_FILENAME and exc.lineno:
        frames.append((exc.lineno, "<module>"))
    text = ["Traceback (most recent call last):"]
    for lineno, func in frames:
        text.append(f"  script line {lineno}, in {func}")
        if 0 < lineno <= len(lines):
            text.append(f"    {lines[lineno - 1].strip()}")
    message = str(exc)
    text.append(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
    out: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": message,
        "line": frames[-1][0] if frames else None,
        "traceback": "\n".join(text),
    }
    if isinstance(exc, ToolError):
        out["code"] = exc.code
    return out


def _jsonable(value: Any) -> tuple[Any, bool]:
    try:
        json.dumps(value)
        return value, False
    except (TypeError, ValueError, RecursionError):
        return repr(value), True


def run_script(
    channel: Channel, script: dict[str, Any], modules: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Compile and run one script; the outcome as the ``done`` message (without ``type``)."""
    next_id = 0

    def call_tool(tool: str, /, **arguments: Any) -> Any:
        nonlocal next_id
        if not isinstance(tool, str):
            raise ToolError("invalid_arguments", "call_tool needs the tool's name as a string")
        next_id += 1
        try:
            channel.send({"type": "call", "id": next_id, "tool": tool, "arguments": arguments})
        except (TypeError, ValueError) as exc:
            raise ToolError(
                "invalid_arguments", f"arguments for {tool} must be JSON values: {exc}", tool
            ) from None
        except _wire.ProtocolError as exc:
            if exc.reason != "oversized":
                raise
            raise ToolError(
                "invalid_arguments",
                f"arguments for {tool} are too large for the bridge: {exc.message}",
                tool,
            ) from None
        reply = channel.codec.expect(channel.recv(), "reply")
        if reply.get("id") != next_id:
            raise _wire.ProtocolError("unexpected", "a reply for another call arrived")
        if reply.get("ok"):
            return reply.get("value")
        error = reply.get("error") or {}
        raise ToolError(
            str(error.get("code", "tool_error")),
            str(error.get("message", "")),
            tool,
            reply.get("decision"),
        )

    source = script.get("source")
    if not isinstance(source, str):
        raise _wire.ProtocolError("malformed", "the script message has no source")
    if script.get("mode") == "plain":
        try:
            code = compile(source, SCRIPT_FILENAME, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return {"status": "compile_error", "errors": [f"Line {exc.lineno}: {exc.msg}"]}
        glb = plain_globals(call_tool)
    else:
        errors, restricted = compile_script(source)
        if errors or restricted is None:
            return {"status": "compile_error", "errors": errors}
        code = restricted
        glb = restricted_globals(call_tool, modules)
    try:
        exec(code, glb)
    except _wire.ProtocolError:
        raise
    except BaseException as exc:  # the script's own failure, reported with its lines
        return {"status": "error", "error": _traceback(exc, source)}
    if "result" in glb:
        value, as_repr = _jsonable(glb["result"])
        return {"status": "ok", "has_result": True, "result": value, "result_repr": as_repr}
    return {"status": "ok", "has_result": False}


def main(argv: list[str]) -> int:
    boot = json.loads(argv[1])
    parent = int(boot.get("parent_pid") or 0)
    if parent:
        _sandbox.set_pdeathsig(parent)
    # Landlock may grant reading the interpreter's own library (lazy imports), nothing else.
    stdlib = [
        p for p in sys.path if p.startswith((sys.base_prefix, sys.prefix)) and os.path.isdir(p)
    ]
    sys.path[:0] = [p for p in boot.get("sys_path", ()) if p not in sys.path]
    for name in (*ALLOWED_MODULES, *_LAZY, "RestrictedPython", "operator", "types"):
        try:
            __import__(name)
        except ImportError:
            if name == "RestrictedPython":
                raise
    from RestrictedPython import compile_restricted_exec  # noqa: F401  (loaded now, used later)

    modules = module_copies()
    # Ready: a fresh runner finds its activation waiting; a spare blocks here until it is used.
    activation = _read_activation(int(boot["secret_fd"]))
    if activation is None:
        return 0
    secret, config = activation
    policy = {**config["policy"], "read_paths": stdlib, "parent_pid": parent}
    try:
        sock = _connect(config["connect"])
        channel = Channel(sock, int(config.get("max_frame") or _wire.DEFAULT_MAX_FRAME))
        channel.handshake(secret)
    except (OSError, _wire.ProtocolError) as exc:
        sys.stderr.write(f"ringfence runner: bridge handshake failed: {exc}\n")
        return EXIT_BRIDGE
    del secret
    try:
        report = _sandbox.apply(policy, watch_fd=sock.fileno())
    except _sandbox.LayerUnavailable as exc:
        channel.send({"type": "sandbox_failed", "layer": exc.layer, "reason": exc.message})
        return EXIT_SANDBOX
    try:
        channel.send({"type": "sandboxed", "report": report})
        script = channel.codec.expect(channel.recv(), "script")
        outcome = run_script(channel, script, modules)
        outcome["type"] = "done"
        try:
            channel.send(outcome)
        except _wire.ProtocolError as exc:
            if exc.reason != "oversized":
                raise
            message = f"the script's result is too large to return: {exc.message}"
            error = {
                "type": "ResultTooLarge",
                "message": message,
                "line": None,
                "traceback": message,
            }
            channel.send({"type": "done", "status": "error", "error": error})
        channel.codec.expect(channel.recv(), "bye")
    except (OSError, _wire.ProtocolError) as exc:
        sys.stderr.write(f"ringfence runner: bridge failed: {exc}\n")
        return EXIT_BRIDGE
    return 0


if __name__ == "__main__":
    # Leave with _exit: interpreter finalization has nothing to flush (output is
    # written unbuffered) and would race the watchdog thread.
    try:
        code = main(sys.argv)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    sys.stderr.flush()
    os._exit(code)
