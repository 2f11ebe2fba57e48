"""Docker errors are translated at one boundary, and no docker-py exception is left unmapped."""

from __future__ import annotations

import inspect

import docker.errors
import pytest
import requests.exceptions

from ringfence.backends.docker._api import DOCKER_ERRORS, map_docker_errors, translate_docker_error
from ringfence.runtime import (
    InvalidArguments,
    RingfenceError,
    ToolError,
    Unavailable,
)


def _docker_exception_classes() -> list[type[BaseException]]:
    return [
        cls
        for _, cls in inspect.getmembers(docker.errors, inspect.isclass)
        if issubclass(cls, BaseException) and cls.__module__ == "docker.errors"
    ]


def test_every_docker_exception_has_a_mapping() -> None:
    missing = [c.__name__ for c in _docker_exception_classes() if c not in DOCKER_ERRORS]
    assert missing == [], f"docker.errors classes without a translation: {missing}"


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, docker.errors.APIError):
        return cls("boom", explanation="it broke")
    if cls is docker.errors.ContainerError:
        return cls("c", 1, "true", "img", b"stderr")
    if cls is docker.errors.BuildError:
        return cls("reason", [])
    if cls is docker.errors.ContextNotFound or cls is docker.errors.ContextAlreadyExists:
        return cls("name")
    if cls is docker.errors.MissingContextParameter:
        return cls("param")
    if cls is docker.errors.ContextException:
        return cls("msg")
    return cls("boom")


@pytest.mark.parametrize("cls", _docker_exception_classes(), ids=lambda c: c.__name__)
def test_each_translation_is_a_specific_ringfence_error(cls) -> None:
    translated = translate_docker_error(_instance(cls))
    assert isinstance(translated, RingfenceError)
    assert "unexpected error from the docker SDK" not in translated.message


@pytest.mark.parametrize(
    ("exc", "kind", "words"),
    [
        (docker.errors.ImageNotFound("no such image: x"), Unavailable, "image"),
        (docker.errors.APIError("500", explanation="No such image: y"), Unavailable, "image"),
        (docker.errors.APIError("409", explanation="conflict"), ToolError, "refused"),
        (
            docker.errors.DockerException("Error while fetching server API version"),
            Unavailable,
            "not reachable",
        ),
        (requests.exceptions.ConnectionError("refused"), Unavailable, "not reachable"),
        (requests.exceptions.ReadTimeout("slow"), Unavailable, "did not answer"),
        (ConnectionResetError("reset"), Unavailable, "not reachable"),
        (docker.errors.InvalidArgument("bad"), InvalidArguments, "invalid"),
    ],
)
def test_translations_say_what_happened(exc, kind, words) -> None:
    translated = translate_docker_error(exc)
    assert type(translated) is kind
    assert words in translated.message


def test_map_docker_errors_translates_and_chains_but_lets_bugs_through() -> None:
    with pytest.raises(Unavailable) as info, map_docker_errors():
        raise requests.exceptions.ConnectionError("nope")
    assert isinstance(info.value.__cause__, requests.exceptions.ConnectionError)
    with pytest.raises(KeyError), map_docker_errors():
        raise KeyError("a bug stays a bug")
    with pytest.raises(InvalidArguments), map_docker_errors():
        raise InvalidArguments("already ours", field="x")
