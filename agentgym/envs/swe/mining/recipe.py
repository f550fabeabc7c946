"""Package recipes and their images: a real package's sdist, unpacked at ``/testbed``.

A :class:`PackageRecipe` names one ``package==version`` from the package index with the
sha256 of its source distribution, its licence, where its source and tests are, and the
wheels of its test dependencies (pure Python, hashes recorded). No package source is kept in
this repository: :func:`fetch_sdist` downloads the sdist
(``pip download --no-binary :all: --no-deps NAME==VER``) into a cache and checks the hash,
and :func:`build_package_image` turns it into an image:

- base: the agentgym sandbox image (Debian Python 3, pytest, git; ``agentgym sandbox
  build-image``);
- ``/testbed``: the unpacked sdist, owned by the ``agent`` user the image runs as,
  importable from there (``PYTHONPATH``, as an editable install would be), with no ``.git``
  (the env makes the task's base commit at reset);
- ``/opt/agentgym-deps``: the unpacked dependency wheels, also on ``PYTHONPATH``.

Nothing in the image needs the network afterwards. The image name carries a hash of the
recipe, so a changed recipe builds a new image.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError, SchemaError, did_you_mean
from agentgym.sandboxes.base import SandboxError

REAL_DIR = Path(__file__).resolve().parent.parent / "real"
"""The shipped mined tasks: ``packages.json`` (recipes) and ``<package>.jsonl`` (instances)."""
IMAGE_REPO = "agentgym-swe-real"
DEPS_DIR = "/opt/agentgym-deps"
WORKDIR = "/testbed"
RECIPE_LABEL = "agentgym.swe-recipe"
AGENT_UID = 1000
"""The base image's ``agent`` user, who owns ``/testbed`` and runs the commands."""
PYTEST = ("python -m pytest -rA -p no:cacheprovider -W ignore -o addopts= --tb=short "
          "-o console_output_style=classic")
"""The test runner: one summary line per test (``-rA``), no ini ``addopts`` (coverage flags
need plugins the image does not have), short tracebacks for the issue text."""
Log = Callable[[str], None]


@dataclass(frozen=True)
class Wheel:
    """A pure-Python test dependency, fetched as a wheel with a recorded hash."""

    name: str
    version: str
    sha256: str


@dataclass(frozen=True)
class PackageRecipe:
    """One package to mine and run; see the module docstring.

    Attributes:
        name: Distribution name on the package index.
        version: Exact version.
        sha256: Hash of its sdist.
        license: SPDX expression of the package's licence.
        split: ``train`` or ``test``; a package's tasks all share it, so test packages are
            never seen in training.
        sources: Paths (relative to the sdist root) of the modules or folders to mutate.
        tests: Pytest targets of its suite (relative to the sdist root).
        python_path: Folder of the sdist that holds the import package (``.`` or ``src``).
        pytest_args: Extra pytest arguments (e.g. ``--ignore`` of a test module that needs
            something the image lacks).
        exclude: Path fragments of files under ``sources`` never mutated (tests, version).
        deps: Test and runtime dependencies, as wheels.
        seed: Mining seed (which mutants are tried, in which order).
        budget: Mutants tried.
        max_tasks: Most tasks kept.
        per_function: Most tasks kept from one function (spreads tasks over the code).
        dropped: Instance ids that mining keeps but the shipped file leaves out, each with
            the reason (a task that failed validation in Docker after mining). Mining
            draws them as before, so the other tasks stay the same, and then omits them.
    """

    name: str
    version: str
    sha256: str
    license: str
    split: str
    sources: tuple[str, ...]
    tests: tuple[str, ...]
    python_path: str = "."
    pytest_args: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ("tests/", "test_", "_version.py", "conftest.py")
    deps: tuple[Wheel, ...] = ()
    seed: int = 0
    budget: int = 80
    max_tasks: int = 36
    per_function: int = 2
    dropped: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.split not in ("train", "test"):
            raise SchemaError(f"recipe {self.name}: split must be 'train' or 'test', got "
                              f"{self.split!r}")
        if len(self.sha256) != 64:
            raise SchemaError(f"recipe {self.name}: sha256 must be 64 hex digits, got "
                              f"{self.sha256!r}")

    @property
    def spec(self) -> str:
        """``name==version``."""
        return f"{self.name}=={self.version}"

    @property
    def slug(self) -> str:
        """A name safe in ids and image tags."""
        return self.name.lower().replace("_", "-")

    def recipe_hash(self) -> str:
        """Short hash of everything that goes into the image."""
        from agentgym.sandboxes.image import recipe as base_recipe

        text = json.dumps([base_recipe(), self.spec, self.sha256, self.python_path,
                           [asdict(d) for d in self.deps]])
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    @property
    def image(self) -> str:
        """The image name (the tag carries the recipe hash)."""
        return f"{IMAGE_REPO}:{self.slug}-{self.version}-{self.recipe_hash()}"

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for the agent's commands and the test run."""
        src = WORKDIR if self.python_path == "." else f"{WORKDIR}/{self.python_path}"
        return {"PYTHONPATH": f"{src}:{DEPS_DIR}", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

    def test_cmd(self) -> str:
        """The task's test command (``{tests}`` is where the test ids go)."""
        return " ".join([PYTEST, *self.pytest_args, "{tests}"])

    def to_dict(self) -> dict[str, Any]:
        """JSON form (as in ``packages.json``)."""
        out = asdict(self)
        out["deps"] = [asdict(d) for d in self.deps]
        return out

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> PackageRecipe:
        """A recipe from its JSON form; unknown keys are an error naming the known ones."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(record) - known)
        if unknown:
            raise SchemaError(f"recipe {record.get('name')!r}: unknown keys {unknown}; known: "
                              f"{sorted(known)}")
        data = dict(record)
        data["deps"] = tuple(Wheel(**d) for d in data.get("deps", ()))
        for key in ("sources", "tests", "pytest_args", "exclude"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)


@dataclass(frozen=True)
class RecipeBook:
    """Every shipped package recipe, by name."""

    recipes: Mapping[str, PackageRecipe] = field(default_factory=dict)

    def get(self, name: str) -> PackageRecipe:
        """The recipe of ``name`` (``name==version`` also accepted)."""
        base, _, version = name.partition("==")
        recipe = self.recipes.get(base)
        if recipe is None:
            raise ConfigError(f"no recipe for the package {base!r}"
                              f"{did_you_mean(base, self.recipes)}; known: "
                              f"{sorted(self.recipes)} (add one to {REAL_DIR / 'packages.json'})")
        if version and version != recipe.version:
            raise ConfigError(f"the recipe of {base} is for version {recipe.version}, not "
                              f"{version}; edit its version and sha256 in packages.json")
        return recipe

    def by_image(self, image: str) -> PackageRecipe | None:
        """The recipe whose image is ``image``, if any."""
        return next((r for r in self.recipes.values() if r.image == image), None)


def load_recipes(path: Path = REAL_DIR / "packages.json") -> RecipeBook:
    """The recipes in ``path`` (a JSON object: package name -> recipe)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return RecipeBook({name: PackageRecipe.from_dict({"name": name, **rec})
                       for name, rec in data.items()})


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_dir() -> Path:
    """Where downloaded sdists and wheels are kept (``~/.cache/agentgym/sdists``)."""
    from agentgym.sandboxes.engine import default_root

    return default_root().parent / "sdists"


def _download(spec: str, sha256: str, binary: bool, log: Log) -> Path:
    """``spec`` from the package index into the cache, its hash checked."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for known in cache.iterdir():  # a cached file with the right hash needs no download
        if known.is_file() and known.name.startswith(tuple(_prefixes(spec))) \
                and sha256_of(known) == sha256:
            return known
    kind = ["--only-binary", ":all:", "--python-version", "3.11"] if binary \
        else ["--no-binary", ":all:"]
    with tempfile.TemporaryDirectory() as tmp:
        log(f"pip download {spec} ...")
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                               *kind, spec, "-d", tmp], capture_output=True, text=True)
        files = list(Path(tmp).iterdir())
        if proc.returncode != 0 or len(files) != 1:
            raise SandboxError(f"pip download {spec} failed (exit {proc.returncode}): "
                               f"{proc.stderr.strip()[-800:]}")
        got = sha256_of(files[0])
        if got != sha256:
            raise SandboxError(f"{files[0].name} has sha256 {got}, but the recipe records "
                               f"{sha256}; the index serves a different file than the one the "
                               "tasks were mined from (fix the recipe only after re-mining)")
        return Path(shutil.move(str(files[0]), cache / files[0].name))


def _prefixes(spec: str) -> list[str]:
    name, _, version = spec.partition("==")
    return [f"{n}-{version}" for n in {name, name.replace("-", "_"), name.replace("_", "-"),
                                       name.lower().replace("-", "_")}]


def fetch_sdist(recipe: PackageRecipe, log: Log = print) -> Path:
    """The recipe's sdist, downloaded once and checked against its sha256."""
    return _download(recipe.spec, recipe.sha256, binary=False, log=log)


def unpack_sdist(recipe: PackageRecipe, dest: Path, log: Log = print) -> Path:
    """Unpack the sdist into ``dest`` (its top folder stripped); returns ``dest``."""
    archive = fetch_sdist(recipe, log)
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
        (top,) = Path(tmp).iterdir()
        shutil.copytree(top, dest, dirs_exist_ok=True)
    return dest


def source_files(recipe: PackageRecipe, root: Path) -> list[str]:
    """The recipe's mutable modules under ``root``, relative and sorted."""
    out: set[str] = set()
    for src in recipe.sources:
        path = root / src
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        for f in files:
            rel = f.relative_to(root).as_posix()
            if not any(x in rel for x in recipe.exclude):
                out.add(rel)
    return sorted(out)


def _tar_tree(root: Path, arcroot: str, tar: tarfile.TarFile) -> None:
    # Owned by the agent user: SWE containers drop every capability, so even root could not
    # write into a tree owned by someone else.
    for path in [root, *sorted(root.rglob("*"))]:
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        rel = path.relative_to(root).as_posix()
        info = tar.gettarinfo(str(path), arcname=arcroot if rel == "." else f"{arcroot}/{rel}")
        info.uid = info.gid = AGENT_UID
        info.uname = info.gname = "agent"
        if info.isfile():
            with open(path, "rb") as f:
                tar.addfile(info, f)
        else:
            tar.addfile(info)


def build_package_image(client: Any, recipe: PackageRecipe, log: Log = print) -> str:
    """Build (or find) the recipe's image in the engine behind ``client``; returns its name.

    Raises:
        SandboxError: A download, a hash check or the engine failed.
    """
    from agentgym.sandboxes.image import DEFAULT_IMAGE, ensure_image

    docker = _docker()
    try:
        client.images.get(recipe.image)
        return recipe.image
    except docker.errors.ImageNotFound:
        pass
    base = ensure_image(client, DEFAULT_IMAGE, log=log)
    with tempfile.TemporaryDirectory(prefix="agentgym-swe-") as tmp:
        src = unpack_sdist(recipe, Path(tmp) / "testbed", log)
        deps = Path(tmp) / "deps"
        deps.mkdir()
        for dep in recipe.deps:
            wheel = _download(f"{dep.name}=={dep.version}", dep.sha256, binary=True, log=log)
            with zipfile.ZipFile(wheel) as z:
                z.extractall(deps)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            _tar_tree(src, WORKDIR.lstrip("/"), tar)
            _tar_tree(deps, DEPS_DIR.lstrip("/"), tar)
        repo, _, tag = recipe.image.partition(":")
        log(f"building {recipe.image} ...")
        try:
            container = client.containers.create(base, command=["true"], network_disabled=True)
            try:
                container.put_archive("/", buf.getvalue())
                container.commit(repo, tag, changes=[
                    f"LABEL {RECIPE_LABEL}={recipe.spec}", f"USER {AGENT_UID}:{AGENT_UID}",
                    *(f"ENV {k}={v}" for k, v in recipe.env.items())])
            finally:
                container.remove(force=True)
        except docker.errors.APIError as exc:
            raise SandboxError(f"building {recipe.image} failed: {exc}") from exc
    return recipe.image


def ensure_package_images(recipes: Sequence[PackageRecipe], log: Log = print) -> list[str]:
    """Build the images of ``recipes`` (starting the private engine when none runs)."""
    from agentgym.sandboxes.engine import client, engine_lease

    with engine_lease() as url:
        c = client(url)
        try:
            return [build_package_image(c, r, log) for r in recipes]
        finally:
            c.close()


_READY: set[str] = set()


async def ensure_task_image(image: str, log: Log = print) -> None:
    """Build ``image`` when it is a mined package's image that the engine lacks.

    Other images are left alone (SWE-bench images are the user's to provide).
    """
    if image in _READY or not image.startswith(IMAGE_REPO + ":"):
        return
    recipe = load_recipes().by_image(image)
    if recipe is None:
        raise ConfigError(f"{image} names no recipe in {REAL_DIR / 'packages.json'} (the "
                          "recipe changed since the task was mined?); mine the package again")
    from agentgym.sandboxes.engine import client, find_engine, in_thread

    url = find_engine()  # the engine the warm pool will use; none: the pool reports it
    if url is None:
        return
    c = client(url)
    try:
        await in_thread(build_package_image, c, recipe, log)
    finally:
        c.close()
    _READY.add(image)


def _docker() -> Any:
    from agentgym.sandboxes.engine import docker_module

    return docker_module()
