"""What a script may import: the module allowlist and the copies a script gets.

Imported by the runner (``_runner``) inside its sandbox, like ``_wire`` and
``_sandbox`` (:mod:`ringfence._confine.boot`), so it needs nothing but the
standard library (the same file runs inside a container).

Module names and the names each module copy holds are allowlists
(``ALLOWED_NAMES``): nothing a script can reach evaluates a string it supplies
as code, resolves an attribute name it supplies without the guard, or writes
attributes behind the write guard's back (``WITHHELD_NAMES`` says what was left
out and why; asking for such a name says so). A script gets a read-only copy of
each allowed module (:func:`module_copies`), never the module itself, and its
``import`` is :func:`import_guard`. Not promised: that the allowed names stay
harmless in a CPython version nobody reviewed them on
(``tests/bridge/test_bridge_escapes.py`` re-checks what they reach).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
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
# Modules the allowed ones import lazily; the runner loads them up front, before the
# sandbox, for the same reason. _strptime is imported by C code (datetime.strptime).
INTERNAL_IMPORTS = frozenset({"_strptime"})
LAZY_IMPORTS = (
    "_strptime", "heapq", "copy", "encodings.latin_1", "encodings.ascii", "encodings.utf_16",
)  # fmt: skip


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


def import_guard(modules: dict[str, Any]) -> Callable[..., Any]:
    """The ``__import__`` a script runs with: ``modules`` (the copies) by name, nothing else.

    A refused import raises ImportError naming the allowed modules, or why a
    ``from`` name was left out.
    """

    def guarded_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:  # fmt: skip
        if level == 0 and name in INTERNAL_IMPORTS and name in sys.modules:
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

    return guarded_import
