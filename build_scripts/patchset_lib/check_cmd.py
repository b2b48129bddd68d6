"""`patchset check --stack NAME[,NAME...]|all [--dir DIR]`: stacks of patches/stacks.json checked
alone with the stacks they need.

A pristine git tree as `pristine --git` makes it (the verified orig tarball, one commit tagged
v1.13.1) at DIR or in a temp dir; per selection the tree is reset to that commit, the selected
stacks and every stack they need, transitively, are applied in series order with `git am` (no
3-way, no fuzz), then the series' own test files of that tree run on the patched side only, as
`upstream-tests --checkout` runs the series' files, restricted to the tests the selected stacks'
patches bring (`series_tests.series_targets`, the selection of test/test_series_per_patch.py).
`--stack all`: every stack alone with its needs, one after another, a summary line each. Exit 1
if a selection does not apply or a test fails. Needs the cached orig tarball and the project
.venv with its import hook (`setup`, `install`; `run` does both), not `setup`'s apt step.
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

from . import series_io
from .common import PatchsetError, Project, Runner, add_command, base_pin, raise_if
from .overlay import ensure_overlay
from .project_venv import check_project_venv
from .series_tests import series_targets
from .source import check_tarball, tarball_path, write_pristine_tree
from .stacks import Stack, load_stacks, select, stack_patches, with_needs
from .upstream_tests_cmd import node_selections, run_series_files

SETUP = "./build_scripts/patchset setup"


@dataclasses.dataclass(frozen=True)
class Outcome:
    label: str  # the selection, e.g. "views" or "core,views"
    applied: Sequence[str]  # the stacks applied, needs included, in series order
    patches: int
    error: Optional[str] = None  # why they did not apply
    failing: Sequence[str] = ()

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failing

    def summary(self) -> str:
        what = f"{self.label}: {self.patches} patches ({', '.join(self.applied)})"
        if self.error is not None:
            return f"{what}: FAILED to apply: {self.error.splitlines()[0]}"
        return f"{what}: {'ok' if self.ok else f'FAILED, {len(self.failing)} tests failing'}"


def check_prerequisites(project: Project) -> Optional[str]:
    """What `check` needs of `setup`: the verified orig tarball and the project .venv."""
    error = check_tarball(tarball_path(project), base_pin(project)["orig_tarball_sha256"])
    if error is not None:
        return f"{error}: run {SETUP} (or ./build_scripts/patchset pristine DIR, which fetches it) first"
    return check_project_venv(project)


def selections(stacks: Sequence[Stack], text: str) -> List[List[Stack]]:
    """`all`: every stack alone; else the one selection named."""
    if text == "all":
        return [[stack] for stack in stacks]
    return [select(stacks, text)]


def reset_tree(runner: Runner, tree: Path, base: str) -> None:
    env = series_io.isolated_env()
    runner.git("checkout", "-q", "-f", "-B", "check", base, cwd=tree, env=env, capture=True)
    runner.git("clean", "-q", "-f", "-d", "-x", cwd=tree, env=env, capture=True)


def check_one(project: Project, runner: Runner, tree: Path, base: str, stacks: Sequence[Stack],
              chosen: Sequence[Stack]) -> Outcome:
    applied = with_needs(stacks, chosen)
    label = ",".join(s.name for s in chosen)
    names = [s.name for s in applied]
    patches = stack_patches(project, applied)
    print(f"\ncheck {label}: git am of {len(patches)} patches of {', '.join(names)} onto {base[:12]}",
          flush=True)
    reset_tree(runner, tree, base)
    try:
        series_io.am_series(tree, patches, runner, series_io.am_env(project))
    except PatchsetError as exc:
        return Outcome(label, names, len(patches), error=str(exc))
    targets = series_targets(series_io.pristine_files(project), tree, stack_patches(project, chosen))
    failing = run_series_files(project, runner, tree, node_selections(targets), f"-stack-{label}")
    return Outcome(label, names, len(patches), failing=failing)


def run_checks(project: Project, runner: Runner, tree: Path, text: str) -> List[Outcome]:
    stacks = load_stacks(project)
    groups = selections(stacks, text)
    raise_if(check_prerequisites(project))
    ensure_overlay(project, runner)  # its MANIFEST names the modules the tree's files replace
    write_pristine_tree(project, runner, tree)
    base = series_io.make_git_checkout(project, runner, tree)
    return [check_one(project, runner, tree, base, stacks, chosen) for chosen in groups]


def cmd_check(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    if args.dir is not None:
        outcomes = run_checks(project, runner, Path(args.dir).resolve(), args.stack)
    else:
        with tempfile.TemporaryDirectory(prefix="patchset-check-") as tmp:
            outcomes = run_checks(project, runner, Path(tmp) / "tree", args.stack)
    print("\ncheck summary:")
    for outcome in outcomes:
        print(f"  {outcome.summary()}")
    return 0 if all(o.ok for o in outcomes) else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "check", cmd_check,
        help="apply stacks of patches/stacks.json alone with their needs to a pristine tree and "
             "run their tests",
        description="Write a pristine git tree (as `pristine --git`), `git am` the selected stacks "
                    "and every stack they need, in series order, and run the series' test files "
                    "of that tree that their patches bring, on the patched side (as "
                    "`upstream-tests --checkout`). Needs the cached orig tarball and .venv.",
    )
    parser.add_argument("--stack", required=True, metavar="NAME[,NAME...]|all",
                        help="the stacks to check together (their needs are added), or `all`: "
                             "every stack alone with its needs, one after another")
    parser.add_argument("--dir", metavar="DIR",
                        help="a new or empty directory for the tree, kept afterwards "
                             "(default: a temp dir)")
