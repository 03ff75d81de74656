"""The one packaging step ``pyproject.toml`` cannot say: the package search plus the top-level ``models/`` folder
(the model pairs' data, no code) shipped inside the wheel as ``trserve/models`` (found by ``trserve.paths``)."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["trcore*", "trsim*", "trserve*", "tokenrouter*"]), "trserve.models"],
    package_dir={"trserve.models": "models"},
)
