"""Shared facts and helpers of the patchset tool: paths, the logged command runner, hashes.

Everything here is plain data or small pure functions; no module keeps global state.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence


class PatchsetError(Exception):
    """A user-facing failure: the CLI prints the message and exits 1, nothing changed."""


def raise_if(error: Optional[str]) -> None:
    """For `check_*` helpers, which return None or what is wrong."""
    if error is not None:
        raise PatchsetError(error)


def check_out_dir(out: Path) -> Optional[str]:
    """None when `out` can be written into: absent, or an empty directory."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        return f"{out} exists and is not an empty directory"
    return None


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".patchset-tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclasses.dataclass(frozen=True)
class Project:
    """Where things live, all derived from the repository root."""

    root: Path

    @property
    def patches(self) -> Path:
        return self.root / "patches"

    @property
    def series_file(self) -> Path:
        return self.patches / "series"

    @property
    def base_hashes_file(self) -> Path:
        return self.patches / "base.sha256"

    @property
    def base_pin_file(self) -> Path:
        return self.patches / "base.json"

    @property
    def identity_file(self) -> Path:
        return self.patches / "identity.json"

    @property
    def overlay(self) -> Path:
        return self.root / "torch_overlay"

    @property
    def overlay_manifest(self) -> Path:
        return self.overlay / "MANIFEST"

    @property
    def cache(self) -> Path:
        return self.root / ".cache"

    @property
    def source_cache(self) -> Path:
        """The Debian source package downloads and the private apt state used to fetch them."""
        return self.cache / "debian-source"

    @property
    def pristine(self) -> Path:
        """Pristine copies of the base files, taken from the verified orig tarball."""
        return self.cache / "pristine"

    @property
    def default_checkout(self) -> Path:
        """The cached v1.13.1 tree: pristine unless `apply` was asked to patch it."""
        return self.cache / "checkout" / base_pin(self)["tree_dir"]

    @property
    def patched_checkout(self) -> Path:
        """The cached v1.13.1 tree `run` applies the series to (never .cache/checkout)."""
        return self.cache / "patched-checkout" / base_pin(self)["tree_dir"]

    @property
    def venv(self) -> Path:
        return self.root / ".venv"

    @property
    def venv_python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def log_file(self) -> Path:
        return self.cache / "patchset.log"

    @property
    def tests(self) -> Path:
        return self.root / "test"


def find_project(start: Optional[Path] = None) -> Project:
    here = Path(start or Path(__file__).resolve().parent)
    for candidate in [here, *here.parents]:
        if (candidate / "patches").is_dir() and (candidate / "build_scripts").is_dir():
            return Project(candidate)
    raise PatchsetError(f"cannot find the project root above {here}")


def base_pin(project: Project) -> Dict[str, str]:
    """The pinned base: torch version, Debian source package, orig tarball hash, tree dir."""
    return json.loads(project.base_pin_file.read_text())


def identity(project: Project) -> Dict[str, str]:
    """Fixed author/committer identity and date for reproducible commits and exports."""
    return json.loads(project.identity_file.read_text())


def read_series(project: Project) -> List[Path]:
    names = [
        line.strip()
        for line in project.series_file.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    return [project.patches / name for name in names]


def read_base_hashes(project: Project) -> Dict[str, str]:
    """Map of in-tree path -> sha256 of the pristine base file (ABSENT: the base has none), from
    patches/base.sha256."""
    hashes: Dict[str, str] = {}
    for line in project.base_hashes_file.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        digest, path = line.split(None, 1)
        hashes[path.strip().lstrip("*")] = digest
    return hashes


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# The digest patches/base.sha256 and torch_overlay/MANIFEST give a file the base does not have
# (the series creates it).
ABSENT = "absent"


def file_digest(path: Path) -> str:
    """sha256 of the file at path, or ABSENT when there is none."""
    return sha256_file(path) if Path(path).is_file() else ABSENT


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_base_hashes(hashes: Mapping[str, str], digest_of: Callable[[str], str],
                      shown: Callable[[str], str]) -> Optional[str]:
    """None when every file of `hashes` is the base's, else a sentence naming the first that is
    not. digest_of(path) gives the file's sha256 or ABSENT; shown(path) how to name it."""
    for path, expected in hashes.items():
        actual = digest_of(path)
        if actual == expected:
            continue
        if expected == ABSENT:
            return f"{shown(path)} exists, but the 1.13.1 base has none"
        if actual == ABSENT:
            return f"{shown(path)} is missing"
        return f"{shown(path)} differs from the 1.13.1 base pinned in patches/base.sha256"
    return None


def bytes_digest(files: Mapping[str, bytes]) -> Callable[[str], str]:
    """digest_of for check_base_hashes over in-memory file contents."""
    return lambda path: sha256_bytes(files[path]) if path in files else ABSENT


@dataclasses.dataclass
class Runner:
    """Runs external commands (git, quilt, apt, pip, python); every call is logged.

    The log line goes to stderr when `echo` is set and always to `log_file`, so a failed
    run can be replayed command by command.
    """

    log_file: Optional[Path] = None
    echo: bool = True

    def _log(self, argv: Sequence[str], cwd: Optional[Path]) -> None:
        line = "+ " + " ".join(shlex.quote(str(a)) for a in argv)
        if cwd is not None:
            line += f"    (in {cwd})"
        if self.echo:
            print(line, file=sys.stderr, flush=True)
        if self.log_file is not None:
            self.log_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_file, "a") as log:
                log.write(time.strftime("%Y-%m-%dT%H:%M:%S ") + line + "\n")

    def log_only(self, argv: Sequence[str], cwd: Optional[Path] = None) -> None:
        """Log a command the caller runs itself (e.g. to stream its output as it comes)."""
        self._log(argv, cwd)

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Optional[Path] = None,
        env: Optional[Mapping[str, str]] = None,
        check: bool = True,
        capture: bool = False,
        input: Optional[str] = None,
    ) -> subprocess.CompletedProcess:
        self._log(argv, cwd)
        full_env = None
        if env is not None:
            full_env = dict(os.environ)
            full_env.update(env)
        proc = subprocess.run(
            [str(a) for a in argv],
            cwd=None if cwd is None else str(cwd),
            env=full_env,
            text=True,
            input=input,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
        )
        if check and proc.returncode != 0:
            detail = (proc.stderr or "").strip() if capture else ""
            raise PatchsetError(
                f"command failed with exit {proc.returncode}: {' '.join(map(str, argv))}"
                + (f"\n{detail}" if detail else "")
            )
        return proc

    def git(self, *args: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
        """git, logged like every other command; identity and config come from `env`."""
        return self.run(["git", *args], cwd=cwd, **kwargs)


def check_script(path: Path, what: str) -> Optional[str]:
    """For the commands that only start a script of test/ with the project venv."""
    if not path.is_file():
        return f"{what} {path} is missing"
    return None


def quiet(runner: Runner) -> Runner:
    """Same log file, no echo: for read-only probes and work in temporary directories."""
    return dataclasses.replace(runner, echo=False)


def git_identity_env(project: Project) -> Dict[str, str]:
    ident = identity(project)
    return {
        "GIT_AUTHOR_NAME": ident["name"],
        "GIT_AUTHOR_EMAIL": ident["email"],
        "GIT_COMMITTER_NAME": ident["name"],
        "GIT_COMMITTER_EMAIL": ident["email"],
        "GIT_COMMITTER_DATE": ident["date"],
    }


def add_command(subparsers: argparse._SubParsersAction, name: str, func: Callable[..., int],
                help: str, description: Optional[str] = None, usage: Optional[str] = None,
                **defaults: object) -> argparse.ArgumentParser:
    """A subcommand's parser with `func(project, runner, args)` set: each `*_cmd` module's
    `register` starts with it and then adds its own arguments."""
    parser = subparsers.add_parser(name, help=help, description=description or help, usage=usage)
    parser.set_defaults(func=func, **defaults)
    return parser
