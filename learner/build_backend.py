"""The build backend of mcp-gym-learner: setuptools' (setuptools.build_meta), run on a copy of the sources
in a temporary directory, so that building or installing (`pip install ./learner`) leaves nothing in the
source tree: no build/, no *.egg-info. Editable installs (PEP 660) run in place: they point at the sources.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Iterator

from setuptools import build_meta as _setuptools

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ("pyproject.toml", "MANIFEST.in", "PROTOCOL.md", "build_backend.py", "mcp_gym_learner")


@contextlib.contextmanager
def _in_a_copy() -> Iterator[None]:
    with tempfile.TemporaryDirectory(prefix="mcp-gym-learner-build-") as tmp:
        for name in SOURCES:
            src, dst = os.path.join(HERE, name), os.path.join(tmp, name)
            if os.path.isdir(src):
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(src, dst)
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            yield
        finally:
            os.chdir(cwd)


def get_requires_for_build_wheel(config_settings=None):
    with _in_a_copy():
        return _setuptools.get_requires_for_build_wheel(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    metadata_directory = os.path.abspath(metadata_directory)
    with _in_a_copy():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    wheel_directory = os.path.abspath(wheel_directory)
    with _in_a_copy():
        return _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)


def get_requires_for_build_sdist(config_settings=None):
    with _in_a_copy():
        return _setuptools.get_requires_for_build_sdist(config_settings)


def build_sdist(sdist_directory, config_settings=None):
    sdist_directory = os.path.abspath(sdist_directory)
    with _in_a_copy():
        return _setuptools.build_sdist(sdist_directory, config_settings)


if hasattr(_setuptools, "build_editable"):  # setuptools >= 64
    get_requires_for_build_editable = _setuptools.get_requires_for_build_editable
    prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable
    build_editable = _setuptools.build_editable
