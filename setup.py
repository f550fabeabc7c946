"""Maps envs/, trainers/ and sandboxes/ under the ``agentgym.`` import name.

pyproject.toml holds all metadata; this file only computes the package list, which
setuptools' declarative ``packages.find`` cannot do for remapped folders.
"""

from setuptools import find_packages, setup

ROOTS = {"agentgym": "agentgym", "envs": "agentgym.envs", "trainers": "agentgym.trainers",
         "sandboxes": "agentgym.sandboxes"}

packages: list[str] = []
package_dir: dict[str, str] = {}
for folder, name in ROOTS.items():
    package_dir[name] = folder
    packages.append(name)
    packages += [f"{name}.{sub}" for sub in find_packages(where=folder)]

setup(packages=packages, package_dir=package_dir)
