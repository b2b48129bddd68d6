"""`install` / `uninstall`: make a venv's torch load the patched modules of torch_overlay/.

Two targets: the project `.venv` (default) gets an import hook (`overlay_hook`); `--python PATH`
of a user's venv with pip's torch 1.13.1 gets the overlay files in place of the originals,
backed up first (`pip_torch`). Every check runs before the first byte is written; a refusal
changes nothing.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable, Optional

from .common import PatchsetError, Project, Runner, add_command
from .overlay_hook import install_project_venv, uninstall_project_venv
from .pip_torch import install_into_python, uninstall_from_python


def _python_arg(project: Project, args: argparse.Namespace) -> Optional[Path]:
    """The --python target, or None for the project venv (also when --python names it)."""
    if args.python is None:
        return None
    python = Path(os.path.abspath(os.path.expanduser(args.python)))  # no realpath: venv pythons are symlinks
    if python == Path(os.path.abspath(project.venv_python)):
        return None
    if not python.exists():
        raise PatchsetError(f"no interpreter at {python}")
    return python


def _on_target(project: Project, runner: Runner, args: argparse.Namespace,
               on_venv: Callable[[Project, Runner], None],
               on_python: Callable[[Project, Runner, Path], None]) -> int:
    """`on_venv` for the project .venv, `on_python` for another --python interpreter."""
    python = _python_arg(project, args)
    if python is None:
        on_venv(project, runner)
    else:
        on_python(project, runner, python)
    return 0


def cmd_install(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    return _on_target(project, runner, args, install_project_venv, install_into_python)


def cmd_uninstall(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    return _on_target(project, runner, args, uninstall_project_venv, uninstall_from_python)


def register(subparsers: argparse._SubParsersAction) -> None:
    python_help = ("interpreter of a venv with pip's torch==1.13.1 whose torch modules of the "
                   "overlay MANIFEST get replaced (originals backed up in .cache/backups/); default: the project .venv, "
                   "which gets an import hook instead")
    install = add_command(
        subparsers, "install", cmd_install,
        help="make a venv's torch load the patched overlay",
    )
    install.add_argument("--python", metavar="PATH", help=python_help)
    uninstall = add_command(
        subparsers, "uninstall", cmd_uninstall,
        help="undo install (byte-exact restore)",
    )
    uninstall.add_argument("--python", metavar="PATH", help=python_help)
