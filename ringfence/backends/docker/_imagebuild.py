"""Building and listing the sandbox images from local material (no registry is reachable).

Everything here is blocking (docker-py, debootstrap); async callers use a
worker thread. Progress is reported line by line through a callback. The
recipes themselves are in :mod:`._images`.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors

from ...runtime._errors import InvalidArguments, ToolError, Unavailable
from ._api import map_docker_errors
from ._images import DEBIAN_SUITE, IMAGES, LABEL, ImageInfo, ImageRecipe, recipe_for, recipes_dir

__all__ = ["build_image", "debian_mirror", "ensure_image", "list_images"]

Progress = Callable[[str], None]

HOST_BUSYBOX = Path("/bin/busybox")
DEBIAN_ROOTFS = "ringfence/debian-rootfs:bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def list_images(client: docker.DockerClient) -> list[ImageInfo]:
    """Every recipe (present or not) plus any other image labelled as ringfence's."""
    out: list[ImageInfo] = []
    seen: set[str] = set()
    with map_docker_errors():
        for recipe in IMAGES.values():
            try:
                image = client.images.get(recipe.reference)
            except docker.errors.ImageNotFound:
                out.append(
                    ImageInfo(recipe.name, recipe.reference, False, description=recipe.description)
                )
                continue
            seen.add(image.id)
            out.append(_info(recipe.name, recipe.reference, image, recipe.description))
        for image in client.images.list(filters={"label": LABEL}):
            if image.id in seen:
                continue
            ref = image.tags[0] if image.tags else image.short_id
            out.append(_info(image.labels.get(LABEL, "?"), ref, image, ""))
    return out


def _info(name: str, reference: str, image: Any, description: str) -> ImageInfo:
    attrs = image.attrs
    return ImageInfo(
        name,
        reference,
        True,
        image.short_id.removeprefix("sha256:"),
        attrs.get("Size"),
        attrs.get("Created"),
        description,
    )


def ensure_image(client: docker.DockerClient, name: str, progress: Progress | None = None) -> bool:
    """Build recipe ``name`` unless its image is present. Returns whether it built."""
    recipe = _recipe(name)
    with map_docker_errors():
        try:
            client.images.get(recipe.reference)
            return False
        except docker.errors.ImageNotFound:
            pass
    build_image(client, name, progress)
    return True


def build_image(client: docker.DockerClient, name: str, progress: Progress | None = None) -> str:
    """Build recipe ``name`` and return its image id. Reports progress line by line.

    Raises InvalidArguments for an unknown name, Unavailable when local
    material is missing (busybox-static, debootstrap, root), ToolError when a
    build step fails.
    """
    recipe = _recipe(name)
    say = progress or (lambda _line: None)
    try:
        previous: str | None = client.images.get(recipe.reference).id
    except docker.errors.ImageNotFound:
        previous = None
    if recipe.name == "busybox":
        built = _build_busybox(client, recipe, say)
    else:
        built = _build_debian(client, recipe, say)
    if previous is not None and previous != built:
        # A rebuild leaves the old image untagged; remove it so rebuilds (every CI run) do not
        # pile up hundreds of MB each. An image a container still uses stays, and that is fine.
        try:
            client.images.remove(previous)
            say(f"removed the superseded image {previous[7:19]}")
        except docker.errors.APIError as exc:  # said, not hidden: the daemon's reason
            say(f"kept the superseded image {previous[7:19]}: {exc.explanation or exc}")
    return built


def _recipe(name: str) -> ImageRecipe:
    recipe = recipe_for(name)
    if recipe is None:
        raise InvalidArguments(
            f"unknown sandbox image {name!r}; known: {', '.join(IMAGES)}", field="name"
        )
    return recipe


# -- busybox -------------------------------------------------------------------------------------


def _build_busybox(client: docker.DockerClient, recipe: ImageRecipe, say: Progress) -> str:
    if not HOST_BUSYBOX.is_file():
        raise Unavailable(
            f"{HOST_BUSYBOX} is missing; install Debian's static busybox: "
            "`sudo apt-get install busybox-static`"
        )
    probe = subprocess.run([str(HOST_BUSYBOX), "--list"], capture_output=True, text=True)
    applets = sorted(set(probe.stdout.split()) - {"busybox"})
    if probe.returncode != 0 or "sh" not in applets:
        raise Unavailable(f"{HOST_BUSYBOX} does not list its applets; reinstall busybox-static")
    binary = HOST_BUSYBOX.read_bytes()
    if _has_interpreter(binary):
        raise Unavailable(
            f"{HOST_BUSYBOX} is dynamically linked; the image needs Debian's busybox-static "
            "(`sudo apt-get install busybox-static`)"
        )
    say(f"busybox: {len(applets)} applets from {HOST_BUSYBOX} ({len(binary)} bytes)")
    context, digest = _busybox_context(recipes_dir() / "busybox", binary, applets)
    return _docker_build(client, recipe, context, digest, say)


def _has_interpreter(elf: bytes) -> bool:
    """Whether a 64-bit little-endian ELF names a dynamic loader (a PT_INTERP header)."""

    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return False  # not what Debian ships on 64-bit little-endian; let the build decide
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        (p_type,) = struct.unpack_from("<I", elf, phoff + i * phentsize)
        if p_type == 3:  # PT_INTERP
            return True
    return False


def _busybox_context(recipe: Path, binary: bytes, applets: list[str]) -> tuple[bytes, str]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add_file(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))

        def add_dir(name: str, mode: int = 0o755) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)

        def add_link(name: str, target: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)

        add_file("Dockerfile", (recipe / "Dockerfile").read_bytes())
        for d in ("rootfs", "rootfs/bin", "rootfs/etc", "rootfs/usr", "rootfs/workspace"):
            add_dir(d)
        for d in ("proc", "dev", "sys", "root"):
            add_dir(f"rootfs/{d}", 0o700 if d == "root" else 0o755)
        add_dir("rootfs/tmp", 0o1777)
        for path in sorted((recipe / "rootfs").rglob("*")):
            if path.is_file():
                add_file(f"rootfs/{path.relative_to(recipe / 'rootfs')}", path.read_bytes())
        add_file("rootfs/bin/busybox", binary, 0o755)
        # /usr/bin and /sbin point at /bin, so `#!/usr/bin/env sh` and friends work.
        for alias in ("rootfs/usr/bin", "rootfs/usr/sbin", "rootfs/sbin"):
            add_link(alias, "/bin")
        for applet in applets:
            add_link(f"rootfs/bin/{applet}", "busybox")
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()[:16]


def _docker_build(
    client: docker.DockerClient, recipe: ImageRecipe, context: bytes, digest: str, say: Progress
) -> str:
    image_id: str | None = None
    with map_docker_errors():
        for chunk in client.api.build(
            fileobj=io.BytesIO(context),
            custom_context=True,
            tag=recipe.reference,
            rm=True,
            forcerm=True,
            pull=False,
            labels={LABEL: recipe.name, "ringfence.context": digest},
            decode=True,
        ):
            if "error" in chunk:
                raise ToolError(f"building {recipe.reference} failed: {chunk['error'].strip()}")
            line = chunk.get("stream", "").strip()
            if line:
                say(line)
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
    if image_id is None:
        raise ToolError(f"building {recipe.reference} reported no image id")
    say(f"built {recipe.reference} ({image_id.removeprefix('sha256:')[:12]})")
    return image_id


# -- debian (debootstrap + docker import) --------------------------------------------------------


def debian_mirror() -> str:
    """The host's own Debian mirror (deb822 or one-line sources), else deb.debian.org."""
    for path in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("URIs:"):
                uris = line.split(":", 1)[1].split()
                if uris and "security" not in uris[0]:
                    return uris[0]
            if line.startswith("deb ") and "security" not in line:
                parts = [p for p in line.split() if not p.startswith("[")]
                if len(parts) >= 2:
                    return parts[1]
    return DEFAULT_MIRROR


def _build_debian(client: docker.DockerClient, recipe: ImageRecipe, say: Progress) -> str:
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise Unavailable("debootstrap is missing; install it: `sudo apt-get install debootstrap`")
    if os.geteuid() != 0:
        raise Unavailable("debootstrap needs root: run `sudo ringfence images build debian`")
    folder = recipes_dir() / "debian"
    packages = [
        p.strip()
        for p in (folder / "packages").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(prefix="ringfence-debootstrap-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        argv = [
            debootstrap,
            "--variant=minbase",
            f"--include={','.join(packages)}",
            DEBIAN_SUITE,
            str(rootfs),
            mirror,
        ]
        say(f"debian: {' '.join(argv)}")
        for line in _stream_lines(argv):
            say(line)
        tarball = Path(tmp) / "rootfs.tar"
        say(f"debian: packing {rootfs}")
        _check(["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(tarball), "."])
        say(f"debian: docker import as {DEBIAN_ROOTFS}")
        repository, tag = DEBIAN_ROOTFS.rsplit(":", 1)
        with map_docker_errors():
            client.api.import_image(src=str(tarball), repository=repository, tag=tag)
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        tar.add(str(folder / "Dockerfile"), arcname="Dockerfile")
    data = context.getvalue()
    return _docker_build(client, recipe, data, hashlib.sha256(data).hexdigest()[:16], say)


def _stream_lines(argv: list[str]) -> Iterator[str]:
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    assert proc.stdout is not None
    tail: list[str] = []
    with proc:
        for line in proc.stdout:
            line = line.rstrip()
            tail = [*tail[-19:], line]
            yield line
    if proc.returncode != 0:
        raise ToolError(
            f"{argv[0]} failed with exit code {proc.returncode}; last lines:\n" + "\n".join(tail)
        )


def _check(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace")
    if done.returncode != 0:
        raise ToolError(f"{argv[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
