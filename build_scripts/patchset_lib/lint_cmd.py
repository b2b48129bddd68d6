"""`patchset lint`: upstream's own flake8 over the files the series touches, on a patched copy.

Upstream lints with lintrunner, whose FLAKE8 linter pins flake8 and its plugins in the
checkout's `.lintrunner.toml` (`init_command`); a PR that fails it is not ready to submit.
We install exactly those pins from PyPI into `.venv-lint` (made from an older Python, which
flake8 3.8.2 predates 3.10 for) and run flake8 with the checkout's `.flake8` in a temporary
tree holding that config and the series' files after the whole series. First it checks
patches/upstream-status.json against the series (see `upstream_status`).
"""
from __future__ import annotations

import argparse
import os
import re
import tempfile
import tomllib
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from .series import load_series, patched_result, touched_paths
from .common import PatchsetError, Project, Runner, add_command
from .pyfind import find_python
from .upstream_status import checked_status, status_file
from .venvs import ensure_pinned_venv, venv_python

LINT_VENV = ".venv-lint"
LINTER_CODE = "FLAKE8"
FLAKE8_CONFIG = ".flake8"
# flake8 3.8.2 and pyflakes 2.2.0 predate Python 3.10; 3.8 is what upstream's CI linted with.
LINT_PYTHONS = ((3, 8), (3, 9), (3, 7))


def flake8_pins(lintrunner_toml: str) -> Dict[str, str]:
    """name -> version of the `name==version` arguments of the FLAKE8 linter's init_command."""
    data = tomllib.loads(lintrunner_toml)
    for linter in data.get("linter", []):
        if linter.get("code") == LINTER_CODE:
            pins = dict(re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", arg).groups()
                        for arg in linter.get("init_command", []) if re.fullmatch(r"[A-Za-z0-9_.-]+==\S+", arg))
            if "flake8" not in pins:
                raise PatchsetError(f"the {LINTER_CODE} linter of .lintrunner.toml pins no flake8")
            return pins
    raise PatchsetError(f".lintrunner.toml has no {LINTER_CODE} linter")


def check_lint_checkout(checkout: Path) -> Optional[str]:
    missing = [n for n in (".lintrunner.toml", FLAKE8_CONFIG) if not (checkout / n).is_file()]
    if missing:
        return f"{checkout} has no {' or '.join(missing)}: not a PyTorch 1.13.1 source tree"
    return None


def lint_files(touched: Sequence[str]) -> List[str]:
    return sorted(p for p in touched if p.endswith(".py"))


def parse_findings(output: str) -> List[str]:
    """flake8's `path:line:col: CODE message` lines."""
    return [line for line in output.splitlines() if re.match(r"[^:\s]+:\d+:\d+: [A-Z]+\d+ ", line)]


def run_flake8(runner: Runner, python: Path, tree: Path, files: Sequence[str]) -> List[str]:
    """flake8 in `tree` (its .flake8 applies) over `files`; the findings, or an error if it broke."""
    proc = runner.run([python, "-m", "flake8", *files], cwd=tree, capture=True, check=False,
                      env={"PYTHONDONTWRITEBYTECODE": "1"})
    findings = parse_findings(proc.stdout)
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not findings):
        raise PatchsetError(f"flake8 broke (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return findings


def write_tree(tree: Path, config: bytes, files: Mapping[str, bytes]) -> None:
    (tree / FLAKE8_CONFIG).write_bytes(config)
    for path, data in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)


def ensure_lint_venv(project: Project, runner: Runner, checkout: Path) -> Path:
    pins = flake8_pins((checkout / ".lintrunner.toml").read_text())
    venv = project.root / LINT_VENV
    if not venv_python(venv).exists():
        base = find_python(runner, LINT_PYTHONS, os.environ, "lint (flake8 3.8.2)")
    else:
        base = venv_python(venv)  # only checked for its pins
    ensure_pinned_venv(runner, base, venv, pins, "lint")
    return venv_python(venv)


def lint(project: Project, runner: Runner, checkout: Path) -> List[str]:
    """Findings of upstream's flake8 on the series' files after the series."""
    error = check_lint_checkout(checkout)
    if error:
        raise PatchsetError(error)
    python = ensure_lint_venv(project, runner, checkout)
    result = patched_result(project, runner)
    files = lint_files(touched_paths(runner, load_series(project)))
    with tempfile.TemporaryDirectory(prefix="patchset-lint-") as tmp:
        write_tree(Path(tmp), (checkout / FLAKE8_CONFIG).read_bytes(), {p: result[p] for p in files})
        findings = run_flake8(runner, python, Path(tmp), files)
    print(f"flake8 (pins of {checkout / '.lintrunner.toml'}, config {checkout / FLAKE8_CONFIG}) "
          f"on the patched {', '.join(files)}:")
    for line in findings:
        print(f"  {line}")
    print(f"lint: {len(findings)} finding(s) in {len(files)} file(s)")
    return findings


def cmd_lint(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    checkout = Path(args.checkout).resolve() if args.checkout else project.default_checkout
    status = checked_status(project)  # refused, naming every problem, before flake8 runs
    print(f"lint: {status_file(project)}: one valid entry for each of the {len(status)} patches")
    return 1 if lint(project, runner, checkout) else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "lint", cmd_lint,
        help="upstream's pinned flake8 over the files the series touches, patched",
        description="Check patches/upstream-status.json (an entry per patch subject, known keys "
                    "and values only), then install the flake8 pins of the checkout's .lintrunner.toml into .venv-lint "
                    "and run flake8 with the checkout's .flake8 over the series' files after the "
                    "whole series; exit 1 on any finding.",
    )
    parser.add_argument("--checkout", metavar="DIR",
                        help="source tree whose .lintrunner.toml and .flake8 are used (default: the cache's)")
