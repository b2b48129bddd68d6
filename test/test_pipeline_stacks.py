"""patches/stacks.json: the series' topic stacks, their loader's rules, and each stack checked
alone with the stacks it needs.

The loader's errors are tested on a synthetic series (six patch names, no patch content); the
real file is tested generically (every stack, whatever they are named, applies with its needs).
Last, CI's per-stack check: `patchset check --stack all` (each stack alone with its needs, its
tests run), so the README's test command covers it.
"""
import json
import os
import subprocess
from pathlib import Path
from typing import Dict, Sequence

import pytest
from conftest import REPO, git, package_tree, run_tool

from patchset_lib import series_io
from patchset_lib.check_cmd import Outcome, check_prerequisites
from patchset_lib.common import PatchsetError, Project, Runner, find_project
from patchset_lib.stacks import (
    FIRST,
    dependency_map,
    load_stacks,
    missing_needs,
    refuse_missing,
    select,
    with_needs,
)

PROJECT = find_project(REPO)
NAMES = [f"000{i}-P{i}.patch" for i in range(1, 7)]


def stack(name: str, patches: Sequence[int], needs: Sequence[str] = (), fixes: str = "it") -> Dict:
    return {"name": name, "fixes": fixes, "needs": list(needs), "patches": [NAMES[i - 1] for i in patches]}


GOOD = [stack(FIRST, [1, 2]), stack("alpha", [3], [FIRST]), stack("beta", [4, 5], [FIRST, "alpha"]),
        stack("gamma-2", [6], [FIRST])]


def synthetic(root: Path, stacks: object, names: Sequence[str] = NAMES) -> Project:
    (root / "patches").mkdir(parents=True)
    for name in names:
        (root / "patches" / name).write_text("")
    (root / "patches/series").write_text("".join(f"{n}\n" for n in names))
    (root / "patches/stacks.json").write_text(stacks if isinstance(stacks, str) else json.dumps(stacks))
    return Project(root)


def load_error(tmp_path: Path, stacks: object, names: Sequence[str] = NAMES) -> str:
    with pytest.raises(PatchsetError) as info:
        load_stacks(synthetic(tmp_path, stacks, names))
    return str(info.value)


def test_a_good_file_loads_in_series_order(tmp_path: Path) -> None:
    stacks = load_stacks(synthetic(tmp_path, {"stacks": GOOD}))
    assert [s.name for s in stacks] == [FIRST, "alpha", "beta", "gamma-2"]
    assert stacks[2].patches == (NAMES[3], NAMES[4]) and stacks[2].needs == (FIRST, "alpha")


@pytest.mark.parametrize("stacks, error", [
    ("{not json", "is not JSON"),
    ({"stack": GOOD}, 'must be {"stacks": [...]}'),
    ({"stacks": [{**GOOD[0], "extra": 1}, *GOOD[1:]]}, "stack #1 must have exactly the keys name, fixes, needs, patches"),
    ({"stacks": [GOOD[0], {**GOOD[1], "name": "Alpha"}, GOOD[2], GOOD[3]]}, "stack #2: name 'Alpha' is not of the form"),
    ({"stacks": [GOOD[0], {**GOOD[1], "fixes": "two\nlines"}, *GOOD[2:]]}, "stack #2: fixes must be one non-empty line"),
    ({"stacks": [GOOD[0], {**GOOD[1], "needs": "core"}, *GOOD[2:]]}, "stack #2: needs must be a list of strings"),
    ({"stacks": [GOOD[1], GOOD[0], *GOOD[2:]]}, "the first stack must be named 'core' and need nothing"),
    ({"stacks": [stack(FIRST, [1, 2], ["alpha"]), *GOOD[1:]]}, "needs alpha, not a stack listed before it"),
    ({"stacks": [GOOD[0], stack("alpha", [3], ["beta"]), *GOOD[2:]]}, "stack 'alpha' needs beta, not a stack listed before it"),
    ({"stacks": [GOOD[0], GOOD[1], stack("alpha", [4, 5]), GOOD[3]]}, "stack name 'alpha' is used twice"),
    ({"stacks": [GOOD[0], stack("alpha", [3, 4]), GOOD[2], GOOD[3]]}, "0004-P4.patch is in stack 'alpha' and in 'beta'"),
    ({"stacks": GOOD[:3]}, "0006-P6.patch of patches/series is in no stack"),
    ({"stacks": [GOOD[0], stack("alpha", [3, 5]), stack("beta", [4]), GOOD[3]]},
     "stack 'alpha' is not the contiguous run of patches/series"),
    ({"stacks": [GOOD[0], GOOD[2], GOOD[1], GOOD[3]]}, "stack 'beta' needs alpha, not a stack listed before it"),
    ({"stacks": [GOOD[0], stack("alpha", [])] + GOOD[2:]}, "stack 'alpha' has no patch"),
])
def test_bad_files_are_refused_naming_the_problem(tmp_path: Path, stacks: object, error: str) -> None:
    message = load_error(tmp_path, stacks)
    assert error in message
    assert message.startswith(str(tmp_path / "patches/stacks.json"))


def test_a_patch_the_series_lacks_is_named(tmp_path: Path) -> None:
    message = load_error(tmp_path, {"stacks": GOOD}, NAMES[:5])
    assert "0006-P6.patch is in stack 'gamma-2' but not in patches/series" in message


def test_stacks_out_of_series_order_are_refused(tmp_path: Path) -> None:
    reordered = [GOOD[0], stack("gamma-2", [6], [FIRST]), GOOD[1], GOOD[2]]
    assert "stack 'gamma-2' is not the contiguous run" in load_error(tmp_path, {"stacks": reordered})


def test_missing_file_is_named(tmp_path: Path) -> None:
    project = synthetic(tmp_path, {"stacks": GOOD})
    (project.patches / "stacks.json").unlink()
    with pytest.raises(PatchsetError, match="stacks.json is missing"):
        load_stacks(project)


def test_selection_needs_and_map(tmp_path: Path) -> None:
    stacks = load_stacks(synthetic(tmp_path, {"stacks": GOOD}))
    chosen = select(stacks, "beta")
    assert [s.name for s in with_needs(stacks, chosen)] == [FIRST, "alpha", "beta"]
    assert missing_needs(stacks, chosen) == [FIRST, "alpha"]
    assert refuse_missing(stacks, chosen) == (
        "the selected stacks need core, alpha, not selected; nothing written "
        "(select them too: --stack core,alpha,beta)")
    assert refuse_missing(stacks, select(stacks, "gamma-2,core")) is None
    assert dependency_map(with_needs(stacks, chosen)) == ["core", "alpha <- core", "beta <- core, alpha"]
    with pytest.raises(PatchsetError, match="no stack named delta; stacks: core, alpha, beta, gamma-2"):
        select(stacks, "core,delta")


# ---- the real patches/stacks.json ---------------------------------------------------------------

REAL = load_stacks(PROJECT)


def test_the_real_file_follows_the_rules() -> None:
    assert REAL[0].name == FIRST
    assert sum(len(s.patches) for s in REAL) == len((PROJECT.series_file).read_text().split())


def exported_selection(name: str) -> str:
    """The stack `name` and every stack it needs, as `export --stack` takes them."""
    return ",".join(s.name for s in with_needs(REAL, select(REAL, name)))


@pytest.mark.parametrize("name", [s.name for s in REAL])
def test_every_stack_exported_with_its_needs_applies_with_git_am(name: str, runner: Runner,
                                                                 tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_tool(REPO, "export", "--stack", exported_selection(name), "--format", "git", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    repo = tmp_path / "repo"
    series_io.make_base_repo(series_io.pristine_files(PROJECT), repo, runner)
    patches = sorted(p for p in out.glob("*.patch") if not p.name.startswith("0000-"))
    chosen = with_needs(REAL, select(REAL, name))
    assert len(patches) == sum(len(s.patches) for s in chosen)
    git("am", "-q", *map(str, patches), cwd=repo)


@pytest.mark.parametrize("name", [s.name for s in REAL])
def test_every_stack_exported_with_its_needs_pushes_with_quilt(name: str, base_files: Dict[str, bytes],
                                                              tmp_path: Path) -> None:
    pkg = package_tree(tmp_path / "pkg", base_files)
    proc = run_tool(REPO, "export", "--stack", exported_selection(name),
                    "--debian-patches", str(pkg / "debian/patches"))
    assert proc.returncode == 0, proc.stderr
    push = subprocess.run(["quilt", "push", "-a", "--fuzz=0"], cwd=pkg, capture_output=True, text=True,
                          env={**os.environ, "QUILT_PATCHES": "debian/patches"})
    assert push.returncode == 0, push.stdout[-3000:] + push.stderr[-2000:]
    chosen = with_needs(REAL, select(REAL, name))
    assert push.stdout.count("Applying patch debian/patches/fake-tensor/") == sum(len(s.patches) for s in chosen)


# ---- patchset check -------------------------------------------------------------------------------


def test_check_names_the_known_stacks_for_an_unknown_one() -> None:
    proc = run_tool(REPO, "check", "--stack", "no-such-stack")
    assert proc.returncode == 1
    assert f"no stack named no-such-stack; stacks: {', '.join(s.name for s in REAL)}" in proc.stderr


def test_check_without_the_cached_tarball_names_setup(tmp_path: Path) -> None:
    project = synthetic(tmp_path, {"stacks": GOOD})
    (project.patches / "base.json").write_text(json.dumps({"orig_tarball": "x.orig.tar.xz",
                                                          "orig_tarball_sha256": "0" * 64}))
    error = check_prerequisites(project)
    assert error == ("x.orig.tar.xz is not downloaded: run ./build_scripts/patchset setup (or "
                     "./build_scripts/patchset pristine DIR, which fetches it) first")


def test_summary_lines() -> None:
    assert Outcome("b", ["core", "b"], 3).summary() == "b: 3 patches (core, b): ok"
    assert Outcome("b", ["core", "b"], 3, failing=["T::t"]).summary() == (
        "b: 3 patches (core, b): FAILED, 1 tests failing")
    assert Outcome("b", ["b"], 1, error="git am failed: Patch failed at 0001 X\nmore").summary() == (
        "b: 1 patches (b): FAILED to apply: git am failed: Patch failed at 0001 X")


def test_every_stack_alone_with_its_needs_passes_its_tests(tmp_path: Path) -> None:
    """CI's per-stack check: `check --stack all`, each stack applied alone with the stacks it
    needs to a pristine git tree, the series' test files its patches bring run patched."""
    proc = run_tool(REPO, "check", "--stack", "all", "--dir", str(tmp_path / "tree"))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    summary = proc.stdout.split("\ncheck summary:\n", 1)[1].splitlines()
    assert [line.split(":")[0].strip() for line in summary] == [s.name for s in REAL]
    assert all(line.endswith(": ok") for line in summary), summary
