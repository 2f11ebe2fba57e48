"""``ringfence images build [NAME]`` and ``ringfence images list``: the docker backend's images."""

from __future__ import annotations

import argparse
import sys

import trio

from ..backends.docker._images import IMAGES
from ._output import print_json, print_table, progress_lines
from ._verbs import add_verb_parser


def register(sub: argparse._SubParsersAction) -> None:
    images = add_verb_parser(sub, "images")
    isub = images.add_subparsers(dest="images_verb", required=True, metavar="ACTION")
    build = isub.add_parser(
        "build",
        help="build a sandbox image from local material (no registry needed)",
        description="Images: " + "; ".join(f"{r.name}: {r.description}" for r in IMAGES.values()),
    )
    build.add_argument(
        "name",
        nargs="?",
        choices=list(IMAGES),
        help="which image (default: the docker backend's default, $RINGFENCE_DOCKER_IMAGE or debian)",
    )
    build.add_argument("--json", action="store_true", help="print one JSON object at the end")
    build.set_defaults(func=run_build)
    lst = isub.add_parser("list", help="show which sandbox images are present")
    lst.add_argument("--json", action="store_true", help="print one JSON object")
    lst.set_defaults(func=run_list)


async def run_build(args: argparse.Namespace) -> int:
    from ..backends.docker._api import connect_docker
    from ..backends.docker._imagebuild import build_image
    from ..backends.docker._images import recipe_for
    from ..backends.docker._options import DockerOptions

    name = args.name
    if name is None:
        configured = args.settings.docker_image
        recipe = recipe_for(
            DockerOptions.from_mapping({"image": configured} if configured else {}).image
        )
        name = recipe.name if recipe else "debian"
    # Progress goes to stderr with --json, so stdout stays one JSON object; on a terminal
    # a spinner with the elapsed time stays under the build's lines (debootstrap takes minutes).
    out = sys.stderr if args.json else sys.stdout

    with progress_lines(f"building {IMAGES[name].reference}", out) as progress:

        def build() -> str:
            client = connect_docker()
            try:
                return build_image(client, name, progress)
            finally:
                client.close()

        image_id = await trio.to_thread.run_sync(build)
    if args.json:
        print_json({"ok": True, "result": {"image": IMAGES[name].reference, "id": image_id}})
    return 0


async def run_list(args: argparse.Namespace) -> int:
    from ..backends.docker._api import connect_docker
    from ..backends.docker._imagebuild import list_images

    def listing():
        client = connect_docker()
        try:
            return list_images(client)
        finally:
            client.close()

    images = await trio.to_thread.run_sync(listing)
    if args.json:
        print_json({"ok": True, "result": [i.to_dict() for i in images]})
        return 0
    rows = []
    for i in images:
        size = f"{(i.size_bytes or 0) / 2**20:.1f} MiB" if i.present else "-"
        rows.append((i.name, i.reference, "yes" if i.present else "no", size, i.image_id or "-"))
    print_table(("NAME", "REFERENCE", "PRESENT", "SIZE", "ID"), rows)
    return 0
