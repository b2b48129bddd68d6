"""Each patch of the real series carries its own tests: after `git am` of the first k patches
onto the pristine base files, the tests in that checkout pass against that checkout's torch
files, for every k.

The checkout's torch files are made what `import torch` loads in the project .venv the way
`install` does it: the import hook (`overlay_hook.hook_source`), here pointed at the checkout
and put first on PYTHONPATH, so the venv's `patchset_overlay.pth` loads it, in the pytest run
and in the subprocesses the tests start.  Run: the selection of `series_tests.series_targets`
(shared with `check --stack`): in test/test_weak.py, test/test_meta.py, test/test_proxy_tensor.py
and test/test_fx.py, the test classes the patches 1..k add; in test/test_fake_tensor.py, the
whole file (upstream's tests and those of patches 1..k) where patch k changes it or a module its
tests are about (FAKE_TENSOR_PATHS), else upstream's test classes of it.  Its own test
classes, with thread and subprocess stress, take a minute a prefix: a prefix that only adds Meta
kernels runs them again at the next prefix that changes fake tensors and at the final tree.
`patchset test --quick` runs the last prefix only, with `PATCHSET_SERIES_FILES` naming the test
files of the patches that changed: only their targets run (test_fake_tensor.py whole).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from conftest import REPO
from patchset_lib import series_io
from patchset_lib.common import Runner, find_project, read_series
from patchset_lib.overlay import module_name
from patchset_lib.overlay_hook import HOOK_MODULE, check_overlay_hook, hook_source
from patchset_lib.quick_tests import SERIES_FILES_ENV
from patchset_lib.series_tests import HELPER_DIRS, WHOLE_FILE, series_targets

PROJECT = find_project(REPO)
SERIES = read_series(PROJECT)


def quick_targets(targets: List[str], files: List[str]) -> List[str]:
    """`patchset test --quick`: the targets in `files` only, test_fake_tensor.py whole."""
    kept = [t for t in targets if t.split("::")[0] in files and t.split("::")[0] != WHOLE_FILE]
    return ([WHOLE_FILE] if WHOLE_FILE in files else []) + kept


def copy_helper_dirs(repo: Path, targets: List[str]) -> None:
    """Upstream's helper modules of the targeted test files, from the cached checkout."""
    for path in {t.split("::")[0] for t in targets} & set(HELPER_DIRS):
        source = PROJECT.default_checkout / HELPER_DIRS[path]
        assert source.is_dir(), f"{source}: no cached checkout (run `patchset setup`)"
        shutil.copytree(source, repo / HELPER_DIRS[path])


def changed_torch_modules(runner: Runner, repo: Path, base: str) -> List[str]:
    """The torch/*.py files the applied patches change (or create), relative to repo."""
    return [p for p in series_io.changed_paths(repo, base, "HEAD", runner)
            if p.startswith("torch/") and p.endswith(".py") and (repo / p).is_file()]


def hook_env(repo: Path, changed: List[str], hook_dir: Path) -> Dict[str, str]:
    """Environment under which the venv loads the checkout's changed torch modules."""
    modules = [module_name(p) for p in changed]
    hook_dir.mkdir()
    (hook_dir / f"{HOOK_MODULE}.py").write_text(hook_source(repo, modules))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CI")}
    return {**env, "PYTHONPATH": str(hook_dir), "PATCHSET_OVERLAY": "1"}


def loaded_files(env: Dict[str, str], modules: List[str]) -> List[str]:
    """The file each module is imported from, in one interpreter."""
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    print(importlib.import_module(name).__file__)"
    proc = subprocess.run([str(PROJECT.venv_python), "-c", script, *modules],
                          env=env, capture_output=True, text=True, check=True)
    return proc.stdout.split()


@pytest.fixture(scope="module")
def venv_with_hook() -> Path:
    error = check_overlay_hook(PROJECT)
    assert error is None, error
    return PROJECT.venv_python


@pytest.mark.parametrize("k", range(1, len(SERIES) + 1), ids=lambda k: SERIES[k - 1].name[:4])
def test_first_k_patches_pass_their_tests(k: int, venv_with_hook: Path, runner: Runner,
                                          tmp_path: Path) -> None:
    repo = tmp_path / "checkout"
    pristine = series_io.pristine_files(PROJECT)
    base = series_io.make_base_repo(pristine, repo, runner)
    series_io.am_series(repo, SERIES[:k], runner, series_io.am_env(PROJECT))
    changed = changed_torch_modules(runner, repo, base)
    assert changed
    env = hook_env(repo, changed, tmp_path / "hook")
    # a module the prefix leaves unchanged is loaded from the base install
    assert loaded_files(env, [module_name(p) for p in changed]) == [str(repo / p) for p in changed]
    targets = series_targets(pristine, repo, SERIES[k - 1:k])
    if os.environ.get(SERIES_FILES_ENV):
        targets = quick_targets(targets, os.environ[SERIES_FILES_ENV].split(","))
        assert targets, f"{SERIES_FILES_ENV}: none of these files has tests of the series"
    copy_helper_dirs(repo, targets)
    proc = subprocess.run(
        [str(venv_with_hook), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *[t[len("test/"):] for t in targets]],
        cwd=repo / "test", env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout.splitlines()[-1] and " failed" not in proc.stdout.splitlines()[-1]
