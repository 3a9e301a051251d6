"""Packaging glue pyproject.toml cannot express: the top-level ``policies/`` directory (the
source of truth for the built-in rules) ships inside the wheel as ``gitopsbot._builtin_policies``
so an installed bot (the container image) has its rules without the checkout."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["gitopsbot", "gitopsbot.*"]), "gitopsbot._builtin_policies"],
    package_dir={"gitopsbot._builtin_policies": "policies"},
)
