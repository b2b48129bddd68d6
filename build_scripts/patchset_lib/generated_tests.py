"""The repo's copy of the test files the series extends: generated, like torch_overlay/.

Each patch of the series adds the tests of its own change to upstream's test file, in the
patch itself.  The repo keeps `test/test_fake_tensor.py` (upstream's tests and the series') and
`test/test_weak.py` (the series creates it) as they are after the whole series, so that
`pytest test/` runs them against the overlay.
`refresh` and `overlay` write it from pristine base + series, `overlay --check` fails when it
differs; edit the tests in a patch checkout, never here.
"""
from __future__ import annotations

import os
from typing import Dict, List, Mapping, Optional

from .common import PatchsetError, Project

EXTENDED_TEST = "test/test_fake_tensor.py"
CREATED_TESTS = ("test/test_weak.py",)
GENERATED_TESTS = (EXTENDED_TEST, *CREATED_TESTS)


def expected_tests(result: Mapping[str, bytes]) -> Dict[str, bytes]:
    """The generated test files, from the base files after the whole series (a file the series
    creates is generated once the series creates it)."""
    if EXTENDED_TEST not in result:
        raise PatchsetError(f"{EXTENDED_TEST} is not among the base files of patches/base.sha256")
    return {path: result[path] for path in GENERATED_TESTS if path in result}


def stale_tests(project: Project, wanted: Mapping[str, bytes]) -> List[str]:
    return [path for path, data in wanted.items()
            if not (project.root / path).is_file() or (project.root / path).read_bytes() != data]


def write_tests(project: Project, wanted: Mapping[str, bytes]) -> List[str]:
    """Write the generated test files that differ; returns their paths."""
    stale = stale_tests(project, wanted)
    for path in stale:
        target = project.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".patchset-tmp")
        tmp.write_bytes(wanted[path])
        os.replace(tmp, target)
    return stale


def check_tests(project: Project, wanted: Mapping[str, bytes]) -> Optional[str]:
    stale = stale_tests(project, wanted)
    if not stale:
        return None
    return (f"{', '.join(stale)} differs from pristine base + series (it is generated: change the "
            "tests in a patch checkout, then `patchset refresh --from DIR`)")
