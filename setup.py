"""Packaging: the repository's top-level folders install under one ``shoal`` namespace.

``broker/``, ``client/``, ``protocol/`` and ``schemas/`` stay where they are in the
repository (short paths to read and review), and are installed as ``shoal.broker``,
``shoal.client``, ``shoal.protocol`` and ``shoal.schemas``, so that no generic
top-level name is installed. Everything else is in pyproject.toml; this file only
computes the package list, which pyproject.toml cannot express with a remapped
package directory.
"""

from setuptools import find_packages, setup

ROOTS = ("broker", "client", "protocol", "schemas")

packages = ["shoal", *find_packages(include=["shoal.*"])]
for root in ROOTS:
    packages += [f"shoal.{name}" for name in find_packages(include=[root, f"{root}.*"])]

setup(
    packages=packages,
    package_dir={"shoal": "shoal", **{f"shoal.{root}": root for root in ROOTS}},
)
