"""A hardened container held by a lease: it is removed, volumes and all, when its owner goes.

Docker removes a container on its own only when it stops (``auto_remove``), and
nothing stops a container whose owner was killed: a killed kernel's container and
its volumes used to stay until the next session from that host swept them. Here
every ringfence container is created with ``OpenStdin`` and ``StdinOnce`` and its
main process ends with ``exec cat >/dev/null`` reading its stdin; the owner
attaches to that stdin before the start and holds the connection (the *lease*)
for the container's life. When the owner's process ends, however it ends, the
kernel closes the connection, the daemon closes the container's stdin (that is
what ``StdinOnce`` means: closed after the first attached client leaves), ``cat``
reads end of file, the container stops, and ``auto_remove`` removes it with its
anonymous volumes (the shipped workspace's). Measured here: gone within a second.

Nothing a command does can end the lease early but its own session: the main
process is root (no capabilities) and commands never are. docker-py's
``containers.create`` cannot set ``StdinOnce``; the container is made with its
public low-level calls (``create_host_config``, ``create_container_config``,
``create_container_from_config``) instead.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping, Sequence
from typing import Any

import docker

from ._shell import own_socket

__all__ = ["LEASE_TAIL", "create_leased"]

# How a leased container's main command ends (its stdin is the lease).
LEASE_TAIL = "exec cat >/dev/null"


def create_leased(
    client: docker.DockerClient,
    *,
    image: str,
    command: Sequence[str],
    name: str,
    labels: Mapping[str, str],
    environment: Sequence[str],
    host: Mapping[str, Any],
) -> tuple[Any, socket.socket]:
    """Create, attach the lease, start (blocking); ``host`` are ``create_host_config``'s
    keywords. Returns the container (a docker-py model) and the lease's socket, which the
    caller keeps open for the container's life. A container made before a failure is removed."""
    api = client.api
    host_config = api.create_host_config(**host, auto_remove=True)
    config = api.create_container_config(
        image,
        list(command),
        hostname="ringfence",
        user="0:0",
        detach=True,
        stdin_open=True,
        environment=list(environment),
        working_dir="/workspace",
        labels=dict(labels),
        host_config=host_config,
    )
    config["StdinOnce"] = True  # our own config value: ContainerConfig is a dict
    container_id = api.create_container_from_config(config, name)["Id"]
    lease: socket.socket | None = None
    try:
        lease = own_socket(api.attach_socket(container_id, params={"stdin": 1, "stream": 1}))
        api.start(container_id)
        return client.containers.get(container_id), lease
    except BaseException:
        if lease is not None:
            lease.close()
        with contextlib.suppress(Exception):
            api.remove_container(container_id, force=True, v=True)
        raise
