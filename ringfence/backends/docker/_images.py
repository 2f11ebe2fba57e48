"""The sandbox images: their recipes, names, and what to say when one is missing.

Recipes live in ``recipes/<name>/`` next to this module (package data: a wheel ships them);
:mod:`._imagebuild` builds and lists them through the daemon. This module
does not import the docker SDK (``ringfence.backends`` imports it eagerly,
and a kernel on the local backend never pays for docker), and imports no
other backends module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...runtime._errors import Unavailable

__all__ = [
    "IMAGES",
    "ImageInfo",
    "ImageRecipe",
    "docker_location",
    "image_missing",
    "recipe_for",
    "recipes_dir",
    "resolve_image",
]

DEBIAN_SUITE = "bookworm"
LABEL = "ringfence.image"


@dataclass(frozen=True)
class ImageRecipe:
    name: str
    reference: str
    description: str
    slow: bool  # built only on demand, never by tests


IMAGES: dict[str, ImageRecipe] = {
    r.name: r
    for r in (
        ImageRecipe(
            "busybox",
            "ringfence/busybox:latest",
            "FROM scratch + Debian's busybox-static (fast; used by the tests)",
            slow=False,
        ),
        ImageRecipe(
            "debian",
            "ringfence/debian:latest",
            f"Debian {DEBIAN_SUITE} from debootstrap: bash, coreutils, python3",
            slow=True,
        ),
    )
}


def recipe_for(reference: str) -> ImageRecipe | None:
    """The recipe whose short name or full reference is ``reference``."""
    if reference in IMAGES:
        return IMAGES[reference]
    for recipe in IMAGES.values():
        if reference in (recipe.reference, recipe.reference.removesuffix(":latest")):
            return recipe
    return None


def resolve_image(name: str) -> str:
    """A short recipe name (``busybox``) becomes its reference; anything else is kept."""
    recipe = recipe_for(name)
    return recipe.reference if recipe else name


def recipes_dir() -> Path:
    """The image recipes, ``recipes/`` next to this module (shipped in the wheel as package data)."""
    here = Path(__file__).resolve().parent / "recipes"
    if not here.is_dir():
        raise Unavailable(
            f"the image recipes are missing from this ringfence install (looked in {here}); "
            "reinstall ringfence from a wheel built from the source tree, or build images from "
            "a source checkout"
        )
    return here


@dataclass(frozen=True)
class ImageInfo:
    name: str
    reference: str
    present: bool
    image_id: str | None = None
    size_bytes: int | None = None
    created: str | None = None
    description: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reference": self.reference,
            "present": self.present,
            "id": self.image_id,
            "size_bytes": self.size_bytes,
            "created": self.created,
            "description": self.description,
        }


def docker_location() -> str:
    """Where the daemon is looked for: ``DOCKER_HOST`` or the default local socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def image_missing(reference: str) -> Unavailable:
    """The error for a sandbox image that is not present, naming the command that builds it."""
    recipe = recipe_for(reference)
    if recipe is not None:
        how = f"build it with `ringfence images build {recipe.name}`"
        if recipe.slow:
            how += " (debootstrap: a few minutes, needs root and the Debian mirror)"
    else:
        how = f"build or load it (`docker build -t {reference} …` or `docker load`)"
    return Unavailable(
        f"the sandbox image {reference} is not present in the Docker daemon at {docker_location()}; {how}",
        image=reference,
    )
