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
process is root (no capabilities) and commands never are. The main process is ours
whatever the image's configuration says: its ``ENTRYPOINT`` is replaced by none (it ran
first, as the container's root, with ours only its arguments: it wrote a root-owned
workspace bind-mounted without change sets, outside any command, and the commands'
``/tmp``) and its ``HEALTHCHECK`` by ``NONE`` (the daemon ran it as root beside every
command); an image that declares a ``VOLUME`` is refused (:func:`refuse_image_volumes`).
docker-py's
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

from ...runtime._errors import InvalidArguments
from ._shell import own_socket

__all__ = ["LEASE_TAIL", "create_leased", "refuse_image_volumes"]

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
        # The image's ENTRYPOINT never wraps ours (an empty list, not None: Docker keeps the
        # image's for None), and its HEALTHCHECK never runs (as root, every interval).
        entrypoint=[],
        healthcheck={"test": ["NONE"]},
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


def refuse_image_volumes(image: str, attrs: Mapping[str, Any]) -> None:
    """InvalidArguments (``options.image``) when the image declares a ``VOLUME``.

    The daemon makes each declared volume's mount point in the container's file system as
    root before anything of ringfence's runs, and below a path bind-mounted from the host
    (a workspace root, the change sets' upper directories) that directory is the host's:
    ``VOLUME /workspace/.git/hooks`` made ``.git/hooks`` in the workspace, root-owned and in
    no change set. The Engine API has no way to leave an image's volumes out, and a
    sandbox needs none (``/tmp`` is the session's), so such an image is not used.
    ``attrs``: the image's inspection (``Config.Volumes``), from the session's engine.
    """
    config = attrs.get("Config") or {}
    volumes = config.get("Volumes") or {}
    if volumes:
        raise InvalidArguments(
            f"the sandbox image {image} declares VOLUME {', '.join(sorted(map(str, volumes)))}: "
            "the Docker daemon makes a volume's directory as root before the sandbox starts, "
            "on the host where it lies below a workspace root or another host directory the "
            "container mounts, so an image with volumes is not used; build one without a "
            "VOLUME line (FROM it, or `ringfence images build`)",
            field="options.image",
        )
