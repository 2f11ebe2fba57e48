"""Remote MCP server URLs: what is accepted, and how one is shown.

Rules (issue 6, "Transports"):

- ``https`` everywhere; plain ``http`` only for a loopback host (``127.0.0.0/8``,
  ``[::1]``, ``localhost``), for local development.
- Credentials embedded in a URL (``https://user:pass@host``) are refused: secrets
  are named as environment variables, never written into the manifest.
- A URL's query (and fragment) is kept for the server but *displayed* as
  ``<query not shown>`` (``<fragment not shown>``) everywhere ringfence shows or
  logs it, because queries often carry tokens. A URL that still holds one of
  those placeholders is refused, so a displayed form can never replace the real
  query by accident.
- Errors about a URL never repeat it; they name the manifest field instead.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from ..runtime._errors import InvalidArguments
from ..runtime._net import is_loopback

__all__ = [
    "FORBIDDEN_HEADERS",
    "QUERY_PLACEHOLDER",
    "ascii_host_url",
    "check_header_name",
    "check_url",
    "display_url",
    "has_placeholder",
    "scrub_url",
    "url_secrets",
]

QUERY_PLACEHOLDER = "<query not shown>"
FRAGMENT_PLACEHOLDER = "<fragment not shown>"

# Connection-control headers: the transport owns them; configuration may not set them.
FORBIDDEN_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "transfer-encoding",
        "mcp-session-id",
        "mcp-protocol-version",
        # Hop-by-hop relatives of the above; setting them would confuse the transport too.
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
    }
)

# RFC 9110 token characters: a header name outside them is malformed.
_TOKEN_CHARS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def has_placeholder(url: str) -> bool:
    return QUERY_PLACEHOLDER in url or FRAGMENT_PLACEHOLDER in url


def check_url(url: object, field: str = "url") -> str:
    """Return ``url`` unchanged if it is acceptable; raise InvalidArguments naming ``field``.

    The message never contains the URL itself (it may carry a token in its query).
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidArguments(f"{field} must be a non-empty URL string", field=field)
    if has_placeholder(url):
        raise InvalidArguments(
            f"{field} still holds {QUERY_PLACEHOLDER!r} or {FRAGMENT_PLACEHOLDER!r}: that is how "
            "ringfence displays a hidden query, not the query itself; leave the saved URL unchanged "
            "or enter the whole URL",
            field=field,
        )
    if url != url.strip() or any(ord(c) < 0x21 or c == "\x7f" for c in url):
        raise InvalidArguments(
            f"{field} contains whitespace or control characters; enter the URL exactly",
            field=field,
        )
    if "\\" in url:
        # A browser reads a backslash in an http(s) URL as "/": https://evil.example\.github.com
        # goes to evil.example, while Python's urlsplit (and a reader) takes all as the host.
        raise InvalidArguments(
            f"{field} contains a backslash, which a browser reads as '/'; enter the URL with '/' "
            "(or percent-encode it as %5C)",
            field=field,
        )
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port  # raises ValueError on a malformed port
    except ValueError:
        raise InvalidArguments(f"{field} is not a valid URL", field=field) from None
    del port
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise InvalidArguments(
            f"{field} must use https (or http to a loopback host), not {scheme or 'no scheme'!r}",
            field=field,
        )
    if not host:
        raise InvalidArguments(f"{field} has no host", field=field)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise InvalidArguments(
            f"{field} has credentials embedded in it; name them as environment variables "
            "with api_key_env or headers_env instead",
            field=field,
        )
    if scheme == "http" and not is_loopback(host):
        raise InvalidArguments(
            f"{field} uses plain http to a host that is not loopback; remote MCP servers "
            "must use https",
            field=field,
        )
    return url


def display_url(url: str) -> str:
    """The URL as ringfence shows it: scheme, host, port and path; query and fragment hidden."""
    try:
        parts = urlsplit(url)
        netloc = parts.hostname or ""
        if ":" in netloc:  # IPv6 literal
            netloc = f"[{netloc}]"
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return "<malformed URL not shown>"
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    if parts.query:
        shown += f"?{QUERY_PLACEHOLDER}"
    if parts.fragment:
        shown += f"#{FRAGMENT_PLACEHOLDER}"
    return shown


def url_secrets(url: str) -> list[str]:
    """Parts of ``url`` the redactor should hide: its query, fragment and each query value."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    out: list[str] = []
    if parts.query:
        out.append(parts.query)
        for pair in parts.query.split("&"):
            _, _, value = pair.partition("=")
            if value:
                out.append(value)
    if parts.fragment:
        out.append(parts.fragment)
    return out


def check_header_name(name: object, field: str) -> str:
    """A configured header name: a valid token, and not a connection-control header."""
    if not isinstance(name, str) or not name or not set(name) <= _TOKEN_CHARS:
        raise InvalidArguments(f"{field}: {name!r} is not a valid HTTP header name", field=field)
    if name.lower() in FORBIDDEN_HEADERS:
        raise InvalidArguments(
            f"{field}: the {name} header is controlled by the transport and cannot be set "
            "by configuration",
            field=field,
        )
    return name


def scrub_url(text: str, url: str | None) -> str:
    """Take ``url`` (whole, displayed, without its query), its secrets and its host out of ``text``.

    Does not cut: callers redact first and cut after.
    """
    if not url:
        return text
    base = url.split("?", 1)[0].split("#", 1)[0]
    for form in sorted({url, display_url(url), base}, key=len, reverse=True):
        text = text.replace(form, "<server URL>")
    for part in url_secrets(url):
        if len(part) >= 4:
            text = text.replace(part, "<not shown>")
    try:
        host = urlsplit(url).hostname
    except ValueError:
        host = None
    if host:
        text = text.replace(host, "<host>")
    return text


def ascii_host_url(url: str, field: str = "url") -> str:
    """``url`` (checked by :func:`check_url`) with its host as DNS sees it: a host with any
    non-ASCII character in its IDNA ASCII form (``xn--…``), so a person reading the URL sees
    where it goes ("github.com" spelled with a Cyrillic "i", U+0456, is ``xn--gthub-n2e.com``;
    a division slash U+2215, which only looks like a slash, stays inside the host). Raises
    InvalidArguments naming ``field`` for a host IDNA cannot spell.

    Every other non-ASCII character (in the path, query or fragment) is percent-encoded, as a
    browser sends it: a right-to-left override, an invisible or a look-alike character cannot
    make the rest of the URL read as something else ("…/#\u202emoc.buhtig" reads "github.com")."""
    if url.isascii():
        return url
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host.isascii():
        try:
            ascii_host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise InvalidArguments(
                f"{field} has a host that is not a valid internationalized domain name",
                field=field,
            ) from None
        netloc = ascii_host if parts.port is None else f"{ascii_host}:{parts.port}"
        parts = parts._replace(netloc=netloc)
    return parts._replace(
        path=_ascii(parts.path), query=_ascii(parts.query), fragment=_ascii(parts.fragment)
    ).geturl()


def _ascii(text: str) -> str:
    """``text`` with each non-ASCII character percent-encoded (its UTF-8 bytes); ASCII kept."""
    return "".join(c if c.isascii() else quote(c, safe="") for c in text)
