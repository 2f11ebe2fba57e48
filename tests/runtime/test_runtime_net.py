"""One loopback rule (``runtime._net.is_loopback``), the stricter of the two it replaced."""

from __future__ import annotations

import pytest

from ringfence.mcp_host._urls import check_url
from ringfence.runtime import InvalidArguments
from ringfence.runtime._net import is_loopback
from ringfence.serve._http import check_bind

LOOPBACK = ["localhost", "127.0.0.1", "127.8.9.10", "::1", "[::1]"]
NOT_LOOPBACK = [
    None,
    "",
    "LOCALHOST",  # serve's old rule said no, mcp_host's said yes: now no for both
    "localhost.",
    "x.localhost",
    "ip6-localhost",
    "::ffff:127.0.0.1",
    "[127.0.0.1]",
    "[::1",  # serve's old rule stripped any bracket: accepted
    "::1]",
    "0.0.0.0",
    "10.0.0.1",
    "example.com",
]


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback(host: str) -> None:
    assert is_loopback(host)
    check_bind(host, token_configured=False, behind_tls_proxy=False)  # no token needed


@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_not_loopback(host: str | None) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize("host", ["[::1", "::1]", "LOCALHOST", "::ffff:127.0.0.1"])
def test_serve_refuses_an_unauthenticated_bind_the_old_rule_let_through(host: str) -> None:
    with pytest.raises(InvalidArguments):
        check_bind(host, token_configured=False, behind_tls_proxy=False)


def test_mcp_urls_use_the_same_rule() -> None:
    assert check_url("http://localhost:8080/mcp") and check_url("http://[::1]:8080/mcp")
    with pytest.raises(InvalidArguments):
        check_url("http://[::ffff:127.0.0.1]:8080/mcp")
