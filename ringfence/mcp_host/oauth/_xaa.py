"""SEP-990 enterprise-managed authorization for ``oauth_grant = "identity_assertion"``.

Leg 1 (RFC 8693 token exchange at the IdP) is :class:`IdpExchange`: the user's IdP ID
token (from ``idp_id_token_env``) is exchanged at ``idp_token_endpoint`` for an
ID-JAG whose audience is the configured ``oauth_issuer`` and whose resource is this
server. Leg 2 is the SDK's ``IdentityAssertionOAuthProvider``, given the exchange as
its ``assertion_provider`` (its public constructor argument): the ID-JAG is presented
(jwt-bearer, ``client_secret_basic``) only to that issuer's token endpoint, found from
the issuer's own metadata, never from the resource server. :mod:`._provider` wraps
the provider in its ``GuardedAuth`` (a token for another audience never sent, every
failure ``Unavailable`` naming the server) and gives it the sealed storage, whose
tokens carry their stored expiry.

What ringfence adds: the ID token, the ID-JAG, the secrets and the issued tokens are
registered with the redactor; a token for another audience is refused when issued
(not stored) and never sent. Not promised: obtaining the ID token (the IdP login is
the deployment's; it is read from the variable).
"""

from __future__ import annotations

import httpx2
from mcp.client.auth import OAuthTokenError, TokenStorage
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

from ...runtime._redact import Redactor
from ..manifest._load import ServerConfig
from ._tokens import credential_from_env

__all__ = ["IdpExchange", "identity_assertion"]

_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
_ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
_ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


def identity_assertion(
    config: ServerConfig, storage: TokenStorage, redactor: Redactor, secret: str
) -> IdentityAssertionOAuthProvider:
    """The SDK's SEP-990 provider for ``config``, leg 1 being :class:`IdpExchange`."""
    assert config.url and config.client_id and config.oauth_issuer
    return IdentityAssertionOAuthProvider(
        server_url=config.url,
        storage=storage,
        client_id=config.client_id,
        client_secret=secret,
        issuer=config.oauth_issuer,
        assertion_provider=IdpExchange(config, redactor),
        scope=" ".join(config.scopes) or None,
        token_endpoint_auth_method="client_secret_basic",
    )


class IdpExchange:
    """Leg 1: the user's ID token exchanged at the IdP for an ID-JAG (audience, resource)."""

    def __init__(self, config: ServerConfig, redactor: Redactor) -> None:
        self._config = config
        self._redactor = redactor

    async def __call__(self, audience: str, resource: str) -> str:
        config = self._config
        assert config.idp_token_endpoint and config.idp_client_id
        id_token = credential_from_env(config, "idp_id_token_env", self._redactor)
        idp_secret = credential_from_env(config, "idp_client_secret_env", self._redactor)
        form = {
            "grant_type": _TOKEN_EXCHANGE,
            "subject_token": id_token,
            "subject_token_type": _ID_TOKEN,
            "requested_token_type": _ID_JAG,
            "audience": audience,
            "resource": resource,
            "client_id": config.idp_client_id,
        }
        auth = httpx2.BasicAuth(config.idp_client_id, idp_secret) if idp_secret else None
        timeout = config.connect_timeout_seconds
        async with httpx2.AsyncClient(timeout=timeout, follow_redirects=False) as client:
            response = await client.post(config.idp_token_endpoint, data=form, auth=auth)
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code != 200 or not isinstance(body, dict):
            error = body.get("error") if isinstance(body, dict) else None
            raise OAuthTokenError(
                f"the IdP token exchange answered HTTP {response.status_code} ({error or 'no error code'})"
            )
        jag = body.get("access_token")
        if not isinstance(jag, str) or body.get("issued_token_type") != _ID_JAG:
            raise OAuthTokenError("the IdP token exchange did not return an ID-JAG")
        self._redactor.register_credential(jag)
        return jag
