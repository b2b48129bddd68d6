"""`patchset crossref`: FakeTensorMode against real execution over every OpInfo (test/crossref.py).

The script drives its own workers (unpatched and patched, the same venv with PATCHSET_OVERLAY=0
and =1); this command only checks that the pieces exist and starts it, forwarding the options.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Dict, List

from .common import PatchsetError, Project, Runner, add_command, check_script
from .overlay_hook import check_overlay_hook
from .project_venv import check_project_venv
from .sides import checked_torch_dir, installed_sides
from .overlay import check_overlay_files, read_manifest
from .source import ensure_pristine

CROSSREF_SCRIPT = "crossref.py"
# the script's variant names (test/crossref.py VARIANTS); checked here so a typo fails before
# any worker starts
VARIANTS = ("functional", "inplace", "out", "symbolic", "backward")
FORWARD_VARIANTS = VARIANTS[:4]


def crossref_script(project: Project) -> Path:
    return project.tests / CROSSREF_SCRIPT


def forwarded_args(args: argparse.Namespace) -> List[str]:
    argv: List[str] = []
    if args.ops:
        argv += ["--ops", args.ops]
    if args.k:
        argv += ["-k", args.k]
    if args.quick:
        argv.append("--quick")
    if args.fail_on_mismatch:
        argv.append("--fail-on-mismatch")
    if args.json:
        argv += ["--json", str(Path(args.json).resolve())]
    if args.backward:
        argv.append("--backward")
    elif args.variants:
        argv += ["--variants", ",".join(args.variants)]
    return argv


def variant_list(text: str) -> List[str]:
    """argparse type of --variants: known names, at least one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown variant(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(VARIANTS)}")
    return names


def installed_side_specs(project: Project, runner: Runner, python: Path, workdir: Path) -> Dict[str, Dict]:
    """Worker sides for a venv patched by `install --python`: patched as installed, unpatched
    through the import hook pointed at the pristine base files (as `upstream-tests --python`)."""
    entries = read_manifest(project)
    error = check_overlay_files(project, entries)
    if error is not None:
        raise PatchsetError(error)
    torch_dir = checked_torch_dir(project, runner, python, entries)
    ensure_pristine(project, runner)
    return {side.name: {"python": str(side.python), "env": {**side.env, "PYTHONPATH": str(workdir)},
                        "preload": side.plugins[0] if side.plugins else None}
            for side in installed_sides(project, python, torch_dir, entries, workdir)}


def run_crossref(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    python = Path(args.python).absolute() if args.python else None
    checks = [check_script(crossref_script(project), "cross-reference script"), check_project_venv(project)]
    if python is None:
        checks.append(check_overlay_hook(project))
    errors = [error for error in checks if error]
    if errors:
        raise PatchsetError("; ".join(errors))
    argv = [str(project.venv_python), str(crossref_script(project)), *forwarded_args(args)]
    with tempfile.TemporaryDirectory(prefix="patchset-crossref-") as tmp:
        if python is not None:
            sides_file = Path(tmp) / "sides.json"
            sides_file.write_text(json.dumps(installed_side_specs(project, runner, python, Path(tmp))))
            argv += ["--sides", str(sides_file)]
        # The report is the product: stream it, and report failure through the exit code.
        return runner.run(argv, cwd=project.root, check=False).returncode


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "crossref", run_crossref,
        help="compare FakeTensorMode with real execution over every OpInfo, unpatched vs patched",
        description="Run test/crossref.py with the project venv: every op of 1.13.1's op_db "
        "(functional, in-place and out= variants, CPU samples, one dtype) for real and under "
        "FakeTensorMode(allow_fallback_kernels=True), unpatched and patched side by side. "
        "Exits 1 when the patched side has a silent mismatch the unpatched side does not. "
        "The full run takes tens of minutes; progress goes to stderr.",
    )
    parser.add_argument("--ops", help="comma-separated op names")
    parser.add_argument("-k", help="only ops whose name contains this string")
    parser.add_argument("--quick", action="store_true", help="first 2 samples per op and variant")
    parser.add_argument("--fail-on-mismatch", action="store_true",
                        help="exit 1 on any patched silent mismatch, not only new ones")
    parser.add_argument("--json", help="also write every record to this file")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--variants", type=variant_list, metavar="A,B",
                        help=f"which variants, of {', '.join(VARIANTS)} (default: {','.join(FORWARD_VARIANTS)})")
    which.add_argument("--backward", action="store_true",
                        help="the backward variant only: for each sample that supports autograd, "
                        "autograd.grad of its outputs for real and under FakeTensorMode, every "
                        "gradient's dtype, shape, stride, offset and aliasing compared; marks whether "
                        "the forward or the backward reached the fallback")
    parser.add_argument("--python", metavar="PATH",
                        help="a venv patched by `install --python` (e.g. .venv-pip/bin/python): its "
                        "workers run patched as installed and unpatched on the pristine base files")
