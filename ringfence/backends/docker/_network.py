"""The network a docker session given the network joins: a bridge whose containers cannot talk.

A session without the network has none (``network_mode="none"``). One given the network
(``SessionSpec.network``, a warm pool's ``network=True``) used to join Docker's default
bridge, where every container reaches every other (inter-container communication is on
there): one session's command connected to a server another session's command ran, and to
any other container on that bridge. Now each joins :data:`ISOLATED_NETWORK`, a bridge made
with ``com.docker.network.bridge.enable_icc=false``: its containers reach the outside
through the host's NAT as before, and Docker's own rules drop what one of them sends to
another, and what goes between it and another bridge.

The network is made once on each engine, when a session first needs it, and left there
(labelled ``ringfence=1``). Anyone with access to the engine can make a network of that
name first: the one found is used only when it is a bridge with inter-container
communication off (its inspection, every time); otherwise the session is ``unavailable``
naming it and how to remove it.
"""

from __future__ import annotations

from typing import Any

import docker

from ...runtime._errors import Unavailable

__all__ = ["ICC_OPTION", "ISOLATED_NETWORK", "isolated_network"]

ISOLATED_NETWORK = "ringfence-isolated"
ICC_OPTION = "com.docker.network.bridge.enable_icc"


def isolated_network(client: docker.DockerClient) -> str:
    """The id of :data:`ISOLATED_NETWORK` on ``client``'s engine, made when missing (another
    process making it at the same moment is fine). Blocking. Unavailable when a network of
    that name is not a bridge with inter-container communication off."""
    for _ in range(3):
        found = _named(client)
        if found:
            for network in found:
                driver = network.get("Driver")
                icc = (network.get("Options") or {}).get(ICC_OPTION)
                if driver != "bridge" or icc != "false":
                    raise Unavailable(
                        f"the Docker network {ISOLATED_NETWORK} ({str(network.get('Id'))[:12]}), "
                        "which sessions given the network join, is not a bridge with "
                        f"inter-container communication off (driver {driver!r}, {ICC_OPTION} "
                        f"{icc!r}): its containers could reach each other. Remove it (`docker "
                        f"network rm {ISOLATED_NETWORK}`) and ringfence makes it again"
                    )
            return str(sorted(n["Id"] for n in found)[0])
        try:
            client.api.create_network(
                ISOLATED_NETWORK,
                driver="bridge",
                options={ICC_OPTION: "false"},
                labels={"ringfence": "1"},
                check_duplicate=True,
            )
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: made meanwhile by another session
                raise
    raise Unavailable(f"the Docker network {ISOLATED_NETWORK} could not be made or found")


def _named(client: docker.DockerClient) -> list[dict[str, Any]]:
    """Every network named exactly :data:`ISOLATED_NETWORK`, inspected (its options)."""
    listed = client.api.networks(names=[ISOLATED_NETWORK])  # a filter that also matches parts
    return [
        client.api.inspect_network(n["Id"]) for n in listed if n.get("Name") == ISOLATED_NETWORK
    ]
