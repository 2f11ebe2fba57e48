"""SEP-990 enterprise-managed authorization for ``oauth_grant = "identity_assertion"``.

Split from :mod:`._provider` (which builds it in ``build_auth``) to keep that module
under the size limit; it shares that module's sealed storage, and the audience
check and environment-variable reading of :mod:`._tokens`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import httpx2
from mcp.client.auth import OAuthFlowError, OAuthTokenError
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

from ...runtime import Denied, Redactor, Unavailable
from .._urls import scrub_url
from ..manifest._load import ServerConfig
from ._tokens import credential_from_env, token_audience_ok

if TYPE_CHECKING:
    from ._provider import SealedTokenStorage  # which builds this provider (build_auth)

__all__ = ["RingfenceIdentityAssertion"]

_TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
_ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
_ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


class RingfenceIdentityAssertion(IdentityAssertionOAuthProvider):
    """SEP-990 enterprise-managed authorization: the SDK's jwt-bearer provider plus leg 1.

    Leg 1 (RFC 8693 token exchange at the IdP): the user's IdP ID token (from
    ``idp_id_token_env``) is exchanged at ``idp_token_endpoint`` for an ID-JAG
    whose audience is the configured ``oauth_issuer`` and whose resource is this
    server. Leg 2 is the SDK's: the ID-JAG is presented (jwt-bearer,
    ``client_secret_basic``) only to that issuer's token endpoint, found from
    the issuer's own metadata, never from the resource server.

    What ringfence adds: the ID token, the ID-JAG, the secrets and the issued
    tokens are registered with the redactor; a token for another audience is
    refused and forgotten (never sent); a stored token's expiry is the stored
    one (the SDK would recompute it from ``expires_in`` after a restart); every
    failure is ``Unavailable`` naming the server. Not promised: obtaining the
    ID token (the IdP login is the deployment's; it is read from the variable).
    """

    def __init__(
        self, config: ServerConfig, storage: SealedTokenStorage, redactor: Redactor, secret: str
    ) -> None:
        assert config.url and config.client_id and config.oauth_issuer
        super().__init__(
            server_url=config.url,
            storage=storage,
            client_id=config.client_id,
            client_secret=secret,
            issuer=config.oauth_issuer,
            assertion_provider=self._id_jag,
            scope=" ".join(config.scopes) or None,
            token_endpoint_auth_method="client_secret_basic",
        )
        self._config = config
        self._store = storage
        self._redactor = redactor

    async def _id_jag(self, audience: str, resource: str) -> str:
        """Leg 1: exchange the user's ID token at the IdP for an ID-JAG (audience, resource)."""
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

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if not self._initialized:
            tokens = await self._store.get_tokens()
            if tokens is not None and not token_audience_ok(
                tokens.access_token, self._store.resource
            ):
                tokens = None  # a stored token for another audience is never sent
            self._tokens = tokens
            self._expiry = (await self._store.restore()).get("expires_at") if tokens else None
            self._initialized = True
        flow = super()._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                outgoing = await flow.asend((yield outgoing))
        except StopAsyncIteration:
            return
        except Denied:
            self._tokens = None  # another audience's token: forgotten, never sent
            raise
        except (OAuthFlowError, OAuthTokenError, ValueError, httpx2.HTTPError) as exc:
            raise Unavailable(
                f"MCP server {self._config.name!r}: identity-assertion authorization "
                f"failed ({type(exc).__name__}: {scrub_url(str(exc), self._config.url)[:300]})",
                field="auth",
            ) from None
        finally:
            await flow.aclose()
