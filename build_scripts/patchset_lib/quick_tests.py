"""`patchset test --quick`: the tests of what changed against the committed HEAD, in minutes.

What changed: `git diff HEAD` and untracked files under patches/, test/ and build_scripts/. Each
changed file selects tests, with the reason printed:

- a patch (`patches/NNNN-*.patch`): the series' own test files it changes, run as
  test/test_series_per_patch.py runs them, but only after the whole series (its last prefix;
  `SERIES_FILES_ENV` names the files, test_fake_tensor.py whole), and test_series_consistency.py;
  any other file of patches/: test_series_consistency.py;
- a test file `test/test_*.py`: itself; another file of test/ (a helper such as crossref.py):
  the test files that name it; conftest.py: every `test_pipeline_*.py`;
- a tool module `build_scripts/patchset_lib/X.py`: `test_pipeline_X.py` (X without `_cmd`), the
  test files importing X and those `MODULE_TESTS` adds; when none is found (and for cli.py and
  the entry script), every `test_pipeline_*.py`.

test_series_per_patch.py, whichever rule picks it, runs its last prefix only.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from .common import Project, Runner, read_series
from .series_io import isolated_env
from .series_tests import TEST_FILES, patch_paths

WATCHED = ("patches", "test", "build_scripts")
SERIES_FILES_ENV = "PATCHSET_SERIES_FILES"  # read by test/test_series_per_patch.py
PER_PATCH = "test/test_series_per_patch.py"
CONSISTENCY = "test/test_series_consistency.py"
# The files test/test_series_per_patch.py runs; a patch's other test files (test_ops.py) it does not.
ALL_PIPELINE = ("*",)
# Tests of a module that neither its name nor an import finds; ALL_PIPELINE: every pipeline test.
MODULE_TESTS: Dict[str, Tuple[str, ...]] = {
    "fold": ("test/test_pipeline_refresh.py", "test/test_pipeline_readme.py"),
    "test_cmd": ("test/test_pipeline_quick_tests.py",),
    "cli": ALL_PIPELINE,
    "__init__": ALL_PIPELINE,
}


@dataclasses.dataclass(frozen=True)
class Pick:
    """Tests a changed file selects, and why."""

    changed: str
    tests: Tuple[str, ...]
    why: str


def changed_files(project: Project, runner: Runner) -> List[str]:
    """Paths under WATCHED that differ from HEAD (deleted ones included) or git does not track."""
    def git(*args: str) -> List[str]:
        out = runner.git(*args, "--", *WATCHED, cwd=project.root, env=isolated_env(), capture=True).stdout
        return [p for p in out.split("\0") if p]
    return sorted({*git("diff", "--name-only", "--no-renames", "-z", "HEAD"),
                   *git("ls-files", "--others", "--exclude-standard", "-z")})


def all_pipeline(project: Project) -> Tuple[str, ...]:
    return tuple(sorted(f"test/{p.name}" for p in project.tests.glob("test_pipeline_*.py")))


def patch_test_files(patch: Path) -> List[str]:
    return sorted({path for path in patch_paths(patch) if path.startswith("test/")})


def last_prefix(project: Project) -> str:
    """The node of test_series_per_patch.py that runs the whole series (ids: a patch's number)."""
    return f"{PER_PATCH}::test_first_k_patches_pass_their_tests[{read_series(project)[-1].name[:4]}]"


def pick_patch(project: Project, path: str) -> List[Pick]:
    consistency = Pick(path, (CONSISTENCY,), "the series agrees with what is generated from it")
    if not re.fullmatch(r"patches/\d{4}-.*\.patch", path) or not (project.root / path).is_file():
        return [consistency]
    files = patch_test_files(project.root / path)
    harness = [f for f in files if f in TEST_FILES]
    picks = [consistency]
    if harness:
        picks.append(Pick(path, (last_prefix(project),),
                          f"its test files {', '.join(harness)}, after the whole series"))
    others = [f for f in files if f not in TEST_FILES]
    if others:
        picks.append(Pick(path, (), f"its {', '.join(others)}: not run by {PER_PATCH} (nor here)"))
    return picks


def importers(project: Project, module: str) -> List[str]:
    """Test files (not conftest.py) that import patchset_lib's `module` by name."""
    pattern = re.compile(rf"^from patchset_lib(?:\.{module} import |(?:\.\w+)? import .*\b{module}\b)", re.M)
    return sorted(f"test/{p.name}" for p in project.tests.glob("test_*.py") if pattern.search(p.read_text()))


def pick_module(project: Project, path: str) -> Pick:
    module = Path(path).stem
    by_name = f"test/test_pipeline_{re.sub(r'_cmd$', '', module)}.py"
    found = ALL_PIPELINE
    if path.startswith("build_scripts/patchset_lib/") and path.endswith(".py"):
        named = [by_name] if (project.root / by_name).is_file() else []
        table = MODULE_TESTS.get(module, ())
        found = table if table == ALL_PIPELINE else tuple(sorted(
            {*table, *named, *importers(project, module)})) or ALL_PIPELINE
    if found == ALL_PIPELINE:
        return Pick(path, all_pipeline(project), "no test file names it: every test_pipeline_*.py")
    return Pick(path, found, "its tests by name, import or MODULE_TESTS")


def pick_test_file(project: Project, path: str) -> Pick:
    name = Path(path).name
    if path == PER_PATCH:
        return Pick(path, (PER_PATCH,), "the per-patch harness: its last prefix only")
    if re.fullmatch(r"test_.*\.py", name) and path.count("/") == 1:
        return Pick(path, (path,) if (project.root / path).is_file() else (), "a test file: itself")
    if name == "conftest.py":
        return Pick(path, all_pipeline(project), "the fixtures of every test_pipeline_*.py")
    stem = Path(path).stem
    users = tuple(sorted(f"test/{p.name}" for p in project.tests.glob("test_*.py")
                         if re.search(rf"\b{re.escape(stem)}\b", p.read_text())))
    return Pick(path, users, "the test files that name it")


def last_prefix_only(project: Project, pick: Pick) -> Pick:
    """The per-patch harness, whichever rule chose it, runs its last prefix only."""
    return dataclasses.replace(pick, tests=tuple(last_prefix(project) if t == PER_PATCH else t
                                                 for t in pick.tests))


def picks(project: Project, changed: Sequence[str]) -> List[Pick]:
    result: List[Pick] = []
    for path in changed:
        if path.startswith("patches/"):
            result += pick_patch(project, path)
        elif path.startswith("test/"):
            result.append(pick_test_file(project, path))
        else:
            result.append(pick_module(project, path))
    return [last_prefix_only(project, pick) for pick in result]


def series_files(project: Project, changed: Sequence[str]) -> List[str]:
    """The harness files the changed patches change: SERIES_FILES_ENV's value."""
    patches = [p for p in changed if re.fullmatch(r"patches/\d{4}-.*\.patch", p) and (project.root / p).is_file()]
    return sorted({f for p in patches for f in patch_test_files(project.root / p) if f in TEST_FILES})


def selected(chosen: Sequence[Pick]) -> List[str]:
    """The test files and nodes to run, each once, in a stable order."""
    return sorted({test for pick in chosen for test in pick.tests})


def describe(chosen: Sequence[Pick]) -> List[str]:
    return [f"quick: {p.changed}: {p.why}" + (f" -> {', '.join(p.tests)}" if p.tests else "")
            for p in chosen]
