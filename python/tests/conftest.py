"""Fixtures of the Python package's tests (scripts/test_python.sh): the repository's paths and
packages compiled once per test session into a temporary directory."""

import os

import pytest

import cuvil

SOURCE_DIR = os.environ.get("CUVIL_SOURCE_DIR") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_configure(config):
    config.addinivalue_line("markers", "serving_engine: needs Ray Serve or PyTriton (scripts/test_serving.sh runs them)")


def source(*parts: str) -> str:
    return os.path.join(SOURCE_DIR, *parts)


@pytest.fixture(scope="session")
def packages(tmp_path_factory):
    """name -> path of a package compiled from the repository's models (on first use)."""
    out = tmp_path_factory.mktemp("packages")
    made = {}

    def get(name: str, onnx_path: str, **options) -> str:
        if name not in made:
            made[name] = cuvil.compile(onnx_path, str(out / f"{name}.cuvir"), **options)
        return made[name]

    return get


@pytest.fixture(scope="session")
def digits(packages) -> str:
    return packages("digits", source("examples", "digits", "digits.onnx"), dim={"batch": "1:512"})
