"""``ringfence doctor`` and ``ringfence images`` as a person runs them."""

from __future__ import annotations

import io
import json
import re

import pytest
import trio
from backends_helpers import DOCKER_OPTIONS

from ringfence.backends import WarmPool
from ringfence.cli._main import main


def test_doctor_prints_one_line_per_check(capsys) -> None:
    code = main(["doctor", "--backend", "local"])
    out = capsys.readouterr().out.splitlines()
    checks = [line for line in out if line[:4] in ("ok  ", "no  ")]
    names = ["backend local", "docker daemon", "user namespaces", "landlock", "seccomp", "ripgrep"]
    for name in names:
        assert sum(line[4:].startswith(name) for line in checks) == 1, (name, out)
    assert code == 0  # the local backend can always run
    assert any(line.startswith("backend docker: ") for line in out)


def test_doctor_without_a_daemon_says_docker_cannot_run(capsys, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    code = main(["doctor", "--backend", "docker", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["ok"] is False
    assert report["error"]["code"] == "unavailable" and "docker" in report["error"]["message"]
    details = report["error"]["details"]
    daemon = next(c for c in details["checks"] if c["name"] == "docker daemon")
    assert daemon["ok"] is False and "not reachable" in daemon["detail"]
    assert details["backends"] == {"docker": False, "host": True, "local": True}
    assert daemon["fix"] and "dockerd" in daemon["fix"]


def test_doctor_names_a_refused_engine_address_without_telling_to_start_docker(
    capsys, monkeypatch
) -> None:
    """A plain tcp:// DOCKER_HOST off loopback is refused before a request; starting a
    daemon would not help, so the check's fix is the refusal's own (TLS, ssh, loopback)."""
    monkeypatch.setenv("DOCKER_HOST", "tcp://192.0.2.1:2375")  # TEST-NET-1: never contacted
    code = main(["doctor", "--backend", "docker", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    daemon = next(c for c in report["error"]["details"]["checks"] if c["name"] == "docker daemon")
    assert daemon["ok"] is False and "DOCKER_HOST" in daemon["detail"], daemon
    assert daemon["fix"] is None, daemon


@pytest.mark.docker
def test_images_build_and_list(docker_client, capsys) -> None:
    assert main(["images", "build", "busybox"]) == 0
    out = capsys.readouterr().out
    assert "applets" in out and "built ringfence/busybox:latest" in out
    assert main(["images", "list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)["result"]
    busybox = next(i for i in listing if i["name"] == "busybox")
    assert busybox["present"] is True and busybox["reference"] == "ringfence/busybox:latest"
    assert {i["name"] for i in listing} >= {"busybox", "debian"}


@pytest.mark.docker
def test_doctor_checks_the_configured_image(docker_client, capsys, monkeypatch) -> None:
    """RINGFENCE_DOCKER_IMAGE naming a missing image: doctor says docker cannot run."""
    missing = "ringfence-test/never-built:0"
    monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", missing)
    assert main(["doctor", "--backend", "docker", "--json"]) == 1
    details = json.loads(capsys.readouterr().out)["error"]["details"]
    check = next(c for c in details["checks"] if c["name"] == "image (configured)")
    assert check["ok"] is False and missing in check["detail"] and check["fix"]
    assert details["backends"]["docker"] is False
    # The same name present: docker can run. The image is one built FROM the test image, so
    # it carries the recipe's label under another name (as an older build still tagged does):
    # the doctor once took such an image for the recipe's and left the configured check out.
    present = "ringfence-test/tagged:1"
    dockerfile = b"FROM ringfence/busybox:latest\nLABEL dev.ringfence.test=configured\n"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile), tag=present, rm=True)
    try:
        monkeypatch.setenv("RINGFENCE_DOCKER_IMAGE", present)
        assert main(["doctor", "--backend", "docker", "--json"]) == 0
        checks = json.loads(capsys.readouterr().out)["result"]["checks"]
        check = next(c for c in checks if c["name"] == "image (configured)")
        assert check["ok"] is True and present in check["detail"]
    finally:
        docker_client.images.remove(present)


def test_images_build_refuses_unknown_names(capsys) -> None:
    assert main(["images", "build", "alpine"]) == 2  # a parse error: one line, no SystemExit
    assert "alpine" in capsys.readouterr().err


@pytest.mark.docker
def test_rebuilding_removes_the_superseded_image(docker_client) -> None:
    """A rebuild must not leave the old image behind (CI rebuilds on every run)."""
    import contextlib

    import docker.errors

    from ringfence.backends.docker._imagebuild import build_image

    reference = "ringfence/busybox:latest"
    build_image(docker_client, "busybox")
    # Stand in for an older build: a different image under the same tag.
    dockerfile = b"FROM ringfence/busybox:latest\nLABEL dev.ringfence.test=superseded\n"
    older, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile), tag=reference, rm=True)
    lines: list[str] = []
    built = build_image(docker_client, "busybox", lines.append)
    assert built != older.id
    assert docker_client.images.get(reference).id == built
    if any("removed the superseded image" in line for line in lines):
        assert older.id not in {i.id for i in docker_client.images.list(all=True)}
    else:
        # Another test's container started from the tag while it named the older image (the
        # suite's other worker: a CI run saw it): the daemon keeps an image a container uses,
        # and the rebuild says so with the daemon's reason instead of failing or hiding it.
        (kept,) = [line for line in lines if "kept the superseded image" in line]
        assert "container" in kept, lines
        with contextlib.suppress(docker.errors.APIError):
            docker_client.images.remove(older.id)  # best effort: the container may still be there


@pytest.mark.docker
async def test_doctor_counts_ringfence_s_containers_and_a_warm_pool_s(
    docker_client, capsys
) -> None:
    """A pool's containers are visible to an operator who runs `ringfence doctor` (by label)."""

    def pooled() -> int:
        assert main(["doctor", "--backend", "local", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        check = next(c for c in report["result"]["checks"] if c["name"] == "docker containers")
        found = re.search(r"(\d+) from warm pools", check["detail"])
        assert check["ok"] and found, check
        return int(found.group(1))

    async with WarmPool(dict(DOCKER_OPTIONS), size=2) as pool:
        await pool.wait_warm()
        during = await trio.to_thread.run_sync(pooled)
    assert during >= 2, during  # ours, at least (the daemon may be shared)
