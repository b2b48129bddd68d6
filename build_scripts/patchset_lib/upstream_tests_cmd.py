"""`upstream-tests`: run upstream test files against the patched and the unpatched torch.

Two statements per test file. Upstream's file as v1.13.1 has it, from the pristine cached
checkout (`.cache/checkout`, checked against patches/base.sha256), runs on both sides: the
table, the regressions, what the series fixes. The series' version of the file, from a
checkout with the series applied (`--checkout DIR`; `run`'s `.cache/patched-checkout`, which
is also the default when it holds the current series), runs on the patched side only: its
tests must all pass; those only in the series' file are listed as such.

Both sides use the project `.venv`: the patched side with the import hook on, the unpatched
side with PATCHSET_OVERLAY=0 (Debian's system torch). With `--checkout DIR` the patched side
loads the overlaid modules from DIR's own torch/ files (a checkout edited after `apply` is
tested as edited; an unpatched one is refused; torch_overlay/ and the .venv hook are made
first, as `run` does); without it, from torch_overlay/. A tiny pytest plugin records, inside
each run, which files the overlaid modules were loaded from, so a side that silently ran the
wrong torch is an error rather than a misleading table.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shlex
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from .common import (ABSENT, PatchsetError, Project, Runner, add_command, file_digest, raise_if,
                     read_base_hashes)
from .overlay import ManifestEntry, check_overlay_files, ensure_overlay, read_manifest
from .overlay_hook import install_project_venv
from .project_venv import check_project_venv
from .sides import (
    SIDES,
    Side,
    check_checkout_modules,
    checked_torch_dir,
    checkout_side,
    edited_in_checkout,
    installed_sides,
    venv_sides,
)
from .series import checkout_state, hashes, patched_result
from .source import ensure_checkout, ensure_pristine

OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed")
# xpassed: a test the file expects to fail passed. upstream's expected-failure lists predate the
# series, which updates them in its versions of the files: unittest's expectedFailure, a strict
# xfail, test_meta.py's own lists ("RuntimeError: unexpected success aten.x").
UNEXPECTED_SUCCESS = re.compile(r"^(?:\w+: )?[Uu]nexpected success\b|^\[XPASS\(strict\)\]")
LOADCHECK_PLUGIN = "patchset_loadcheck"
# pytest exit codes that mean "the run itself broke" (internal error, usage error).
BROKEN_EXIT_CODES = (3, 4)

# Written into a temporary dir on PYTHONPATH and loaded with `-p`: after the session it
# records where torch and the overlaid modules were imported from.
LOADCHECK_SOURCE = '''\
import json, os, sys


def pytest_sessionfinish(session, exitstatus):
    names = os.environ["PATCHSET_LOADCHECK_MODULES"].split(",")
    loaded = {n: getattr(sys.modules.get(n), "__file__", None) for n in names}
    with open(os.environ["PATCHSET_LOADCHECK_OUT"], "w") as out:
        json.dump(loaded, out)
'''


@dataclasses.dataclass(frozen=True)
class Selection:
    """A test file of the checkout (path relative to the checkout) plus pytest selection args."""

    path: str
    pytest_args: Tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return shlex.join([self.path, *self.pytest_args])

    @property
    def file(self) -> str:
        """The test file's path in a checkout, without ::node suffixes."""
        return self.path.split("::", 1)[0]

    def target(self) -> str:
        """The pytest argument, relative to <checkout>/test (pytest's cwd)."""
        return self.path[len("test/"):]


FAKE_OPS_KEYWORD = "TestFakeTensor and (aminmax or pixel_shuffle or pixel_unshuffle or addbmm or var_mean or batch_norm)"
DEFAULT_SELECTIONS: Tuple[Selection, ...] = (
    Selection("test/test_fake_tensor.py"),
    # the meta converter's tests and the series' own meta-kernel-vs-CPU tests
    Selection("test/test_meta.py", ("-k", "TestMetaConverter or TestMetaKernelsMatchCPU")),
    # the fake tests of the ops whose Meta kernels the series changes (all of them: -k fake)
    Selection("test/test_ops.py", ("-k", FAKE_OPS_KEYWORD)),
    # make_fx over every OpInfo (1,806 tests) takes most of an hour per side on 2 cores: run it
    # with `--files test/test_proxy_tensor.py`.
    Selection("test/test_proxy_tensor.py", ("-k", "not TestProxyTensorOpInfo")),
)


def node_selections(targets: Sequence[str]) -> List[Selection]:
    """Node ids (`test/test_x.py::TestA`, or a whole file) as one selection per test file: one
    pytest run each, its further node ids passed after the first."""
    by_file: Dict[str, List[str]] = {}
    for target in targets:
        by_file.setdefault(target.split("::", 1)[0], []).append(target)
    return [Selection(ids[0], tuple(t[len("test/"):] for t in ids[1:])) for ids in by_file.values()]


def parse_selection(text: str, keyword: Optional[str]) -> Selection:
    """`test/test_x.py`, `test_x.py` or either with `::Class::test` node suffixes."""
    path = text if text.startswith("test/") else f"test/{text}"
    return Selection(path, ("-k", keyword) if keyword else ())


# --- junit XML ---------------------------------------------------------------------------

def case_outcome(case: ET.Element) -> str:
    failure = case.find("failure")
    if failure is not None and case.find("error") is None \
            and UNEXPECTED_SUCCESS.match(failure.get("message") or ""):
        return "xpassed"
    if failure is not None or case.find("error") is not None:
        return "failed"
    skipped = case.find("skipped")
    if skipped is None:
        return "passed"
    # pytest writes xfail as <skipped type="pytest.xfail" message="reason">.
    if skipped.get("type") == "pytest.xfail" or (skipped.get("message") or "").startswith("xfail"):
        return "xfailed"
    return "skipped"


def parse_junit(path: Path) -> Dict[str, str]:
    """Map test id (`classname::name`) -> passed/failed/skipped/xfailed.

    A test reported twice (e.g. passing call, erroring teardown) counts as failed.
    """
    outcomes: Dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = case_outcome(case)
        if outcomes.get(test_id) != "failed":
            outcomes[test_id] = outcome
    return outcomes


def count_outcomes(outcomes: Mapping[str, str]) -> Dict[str, int]:
    counts = {name: 0 for name in OUTCOMES}
    for outcome in outcomes.values():
        counts[outcome] += 1
    return counts


def regressions(unpatched: Mapping[str, str], patched: Mapping[str, str]) -> List[str]:
    """Tests failing on patched that do not fail on unpatched."""
    return sorted(t for t, o in patched.items() if o == "failed" and unpatched.get(t) != "failed")


def fixed_by_series(unpatched: Mapping[str, str], patched: Mapping[str, str]) -> List[str]:
    """Tests failing (or expected to) on unpatched that pass on patched."""
    return sorted(t for t, o in unpatched.items()
                  if o in ("failed", "xfailed") and patched.get(t) in ("passed", "xpassed"))


CHANGES_FILE = "upstream-test-changes.json"


def declared_changes(project: Project) -> Dict[str, str]:
    """patches/upstream-test-changes.json: {test id: why}, upstream's tests that fail patched
    because the series changes that behaviour on purpose (its versions of them are changed)."""
    path = project.patches / CHANGES_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def series_failures(outcomes: Mapping[str, str]) -> List[str]:
    """Tests of the series' file that fail, or that it expects to fail and pass (its lists are
    the series' own)."""
    return sorted(t for t, o in outcomes.items() if o in ("failed", "xpassed"))


def format_table(label: str, unpatched: Mapping[str, str], patched: Mapping[str, str]) -> str:
    left, right = count_outcomes(unpatched), count_outcomes(patched)
    lines = [label, f"  {'':<10}{'unpatched':>10} | {'patched':<10}"]
    lines += [f"  {name:<10}{left[name]:>10} | {right[name]:<10}" for name in OUTCOMES]
    return "\n".join(lines)


def format_counts(outcomes: Mapping[str, str]) -> str:
    counts = count_outcomes(outcomes)
    return ", ".join(f"{counts[name]} {name}" for name in OUTCOMES)


# --- checks ------------------------------------------------------------------------------

def check_checkout(checkout: Path, selections: Sequence[Selection]) -> Optional[str]:
    if not (checkout / "test").is_dir():
        return f"no checkout with a test/ dir at {checkout}: run ./build_scripts/patchset setup first"
    for selection in selections:
        file = checkout / selection.file
        if not file.is_file():
            return f"no test file {file}"
    return None


def upstream_file(project: Project, upstream: Path, selection: Selection) -> Optional[Path]:
    """Upstream's unmodified test file of `selection` in the pristine tree `upstream`; None when
    v1.13.1 has none (a file the series creates, or one only the checkout has). A file the
    series changes must have its pinned base hash there."""
    base = read_base_hashes(project).get(selection.file)
    file = upstream / selection.file
    if base == ABSENT or (base is None and not file.is_file()):
        return None
    if file_digest(file) != base and base is not None:
        raise PatchsetError(f"{file} is not v1.13.1's (patches/base.sha256): is the series applied to "
                            f"{upstream}? `./build_scripts/patchset apply --reverse` takes it back out")
    return file


def fresh_patched_checkout(project: Project, runner: Runner) -> Optional[Path]:
    """`run`'s .cache/patched-checkout when it holds the current series, else None."""
    checkout = project.patched_checkout
    if not checkout.is_dir() or not project.series_file.is_file():
        return None
    state = checkout_state(checkout, read_base_hashes(project), hashes(patched_result(project, runner)))
    return checkout if state.kind == "patched" else None


def check_loaded(side: str, loaded: Mapping[str, Optional[str]], expected: Mapping[str, Path]) -> Optional[str]:
    """None when every module that the run imported came from the expected file."""
    for name, want in expected.items():
        got = loaded.get(name)
        if got is not None and os.path.realpath(got) != os.path.realpath(want):
            return f"{side} run loaded {name} from {got}, expected {want}"
    return None


# --- running -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SideResult:
    outcomes: Dict[str, str]
    loaded: Dict[str, Optional[str]]
    log: Path


def run_side(project: Project, runner: Runner, checkout: Path, selection: Selection, side: Side,
             workdir: Path, tag: str = "") -> SideResult:
    stem = Path(selection.path.split("::", 1)[0]).stem + tag
    junit, loaded_file = workdir / f"{stem}-{side.name}.xml", workdir / f"{stem}-{side.name}.loaded.json"
    log = project.cache / "upstream-tests" / f"{stem}-{side.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {
        **side.env,
        "PYTHONDONTWRITEBYTECODE": "1",  # never drop .pyc files next to the system torch
        "PYTHONPATH": str(workdir),  # only the plugins; a user PYTHONPATH could shadow torch
        "PATCHSET_LOADCHECK_MODULES": ",".join(side.expected),
        "PATCHSET_LOADCHECK_OUT": str(loaded_file),
    }
    plugins = [arg for name in (*side.plugins, LOADCHECK_PLUGIN) for arg in ("-p", name)]
    argv = [side.python, "-m", "pytest", "-p", "no:cacheprovider", *plugins,
            f"--junitxml={junit}", selection.target(), *selection.pytest_args]
    # cwd is <checkout>/test: from the checkout root its torch/ sources would shadow torch.
    proc = runner.run(argv, cwd=checkout / "test", env=env, capture=True, check=False)
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode in BROKEN_EXIT_CODES or not junit.is_file():
        raise PatchsetError(f"pytest on {selection.label} ({side.name}) broke with exit {proc.returncode}; see {log}")
    loaded = json.loads(loaded_file.read_text()) if loaded_file.is_file() else {}
    return SideResult(parse_junit(junit), loaded, log)


def _summary_line(log: Path) -> str:
    lines = [line.strip("= ") for line in log.read_text().splitlines() if line.startswith("=")]
    return lines[-1] if lines else "(no summary)"


def run_upstream_tests(project: Project, runner: Runner, checkout: Optional[Path],
                       selections: Sequence[Selection] = DEFAULT_SELECTIONS,
                       python: Optional[Path] = None, checkout_modules: bool = False,
                       upstream: Optional[Path] = None) -> int:
    """Per selection, upstream's file on both sides (table, regressions, fixed) and the series'
    file of `checkout` on the patched side; 1 iff a regression of upstream's file exists or a
    test of the series' file fails.

    `checkout`: a tree with the series applied, whose test files are the series' (None: none).
    `python`: a venv where `install --python` replaced the torch files (default: the project .venv).
    `checkout_modules`: the patched side loads the overlaid modules from the checkout's torch/.
    `upstream`: the pristine tree of upstream's test files (default: the cached checkout)."""
    checkout = Path(checkout) if checkout is not None else None
    errors = [check_project_venv(project)]
    if checkout is not None:
        errors.append(check_checkout(checkout, selections))
    for error in errors:
        if error is not None:
            raise PatchsetError(error)
    entries = read_manifest(project)
    raise_if(check_overlay_files(project, entries))
    torch_dir = checked_torch_dir(project, runner, python or project.venv_python, entries)
    if checkout_modules:
        raise_if(check_checkout_modules(checkout, entries))
        print(f"patched:  the checkout's own {', '.join(e.path for e in entries)}")
        edited = edited_in_checkout(checkout, entries)
        if edited:
            print(f"          differing from {project.overlay} (base + patches/; "
                  f"`refresh --from {checkout}` carries edits into patches/): {', '.join(edited)}")
    else:
        print(f"overlay:  {project.overlay}")
    upstream = Path(upstream) if upstream is not None else ensure_checkout(project, runner)
    raise_if(check_checkout(upstream, []))
    print(f"upstream: {upstream} (v1.13.1's test files: the tables, both sides)")
    if checkout is None:
        print("checkout: none with the series applied, so the series' tests do not run "
              "(`patchset run` makes .cache/patched-checkout; or --checkout DIR)")
    else:
        print(f"checkout: {checkout} (the series' test files: patched side only)")
    problems: List[str] = []
    with loadcheck_workdir() as workdir:
        if python is None:
            print(f"torch:    {torch_dir} (unpatched side: PATCHSET_OVERLAY=0)")
            sides, tag = venv_sides(project, torch_dir, entries), ""
        else:
            ensure_pristine(project, runner)
            print(f"torch:    {torch_dir} (patched by install --python; unpatched side: the "
                  f"pristine base files of {project.pristine} through an import hook)")
            sides, tag = installed_sides(project, python, torch_dir, entries, workdir), "-python"
        if checkout_modules:
            sides = [checkout_side(s, checkout, entries, workdir) if s.name == "patched" else s
                     for s in sides]
        for selection in selections:
            problems += compare_selection(project, runner, upstream, checkout, selection, sides, workdir, tag)
    return 1 if problems else 0


@contextlib.contextmanager
def loadcheck_workdir() -> Iterator[Path]:
    """A temp dir for the junit files, with the plugin that records what each run loaded."""
    with tempfile.TemporaryDirectory(prefix="patchset-upstream-") as tmp:
        (Path(tmp) / f"{LOADCHECK_PLUGIN}.py").write_text(LOADCHECK_SOURCE)
        yield Path(tmp)


def present_in_checkout(checkout: Path, entries: Sequence[ManifestEntry]) -> List[ManifestEntry]:
    """The overlaid modules `checkout` has, patched or not: loaded from it, so that a module the
    part of the series applied there leaves alone is 1.13.1's (not the overlay's) and one it does
    not create (torch/utils/weak.py without core) is not loaded at all."""
    return [e for e in entries if (checkout / e.path).is_file()]


def run_series_files(project: Project, runner: Runner, checkout: Path,
                     selections: Sequence[Selection], tag: str) -> List[str]:
    """The series' test files of `checkout` (the base with some of the series applied, e.g. a
    stack and its needs) on the patched side only, loading the overlaid modules from the
    checkout's torch/ files, as `upstream-tests --checkout` runs the series' files (upstream's
    are not run; `tag` names the logs); returns the failing tests."""
    raise_if(check_project_venv(project) or check_checkout(checkout, selections))
    entries = present_in_checkout(checkout, read_manifest(project))
    raise_if(check_overlay_files(project, entries) or check_checkout_modules(checkout, entries))
    torch_dir = checked_torch_dir(project, runner, project.venv_python, entries)
    failing: List[str] = []
    with loadcheck_workdir() as workdir:
        patched = next(s for s in venv_sides(project, torch_dir, entries) if s.name == "patched")
        side = checkout_side(patched, checkout, entries, workdir)
        for selection in selections:
            result = checked_run(project, runner, checkout, selection, side, workdir, tag)
            failed = series_failures(result.outcomes)
            print(f"  {selection.file}: {format_counts(result.outcomes)}  (log: {result.log})")
            if failed:
                print_ids("failing", failed)
            failing += failed
    return failing


def checked_run(project: Project, runner: Runner, tree: Path, selection: Selection, side: Side,
                workdir: Path, tag: str) -> SideResult:
    result = run_side(project, runner, tree, selection, side, workdir, tag)
    error = check_loaded(side.name, result.loaded, side.expected)
    if error is not None:
        raise PatchsetError(f"{selection.label}: {error}")
    return result


def print_ids(title: str, test_ids: Sequence[str], new: Sequence[str] = ()) -> None:
    """`title: N` and the ids, those in `new` marked as only in the series' file."""
    print(f"  {title}: {len(test_ids)}")
    mark = "  (only in the series' file)"
    for test_id in test_ids:
        print(f"    {test_id}{mark if test_id in new else ''}")


def compare_selection(project: Project, runner: Runner, upstream: Path, checkout: Optional[Path],
                      selection: Selection, sides: Sequence[Side], workdir: Path, tag: str = "") -> List[str]:
    """Upstream's file of one selection on both sides (table and lists), then the series' file
    on the patched side; returns the regressions and the failing tests of the series' file."""
    print()
    original = upstream_file(project, upstream, selection)
    seen: Dict[str, str] = {}
    problems: List[str] = []
    if original is None and checkout is None:
        raise PatchsetError(f"no test file {upstream / selection.file} (v1.13.1 has none) and no "
                            "checkout with the series applied to take the series' file from")
    if original is None:
        print(selection.label)
        print(f"  v1.13.1 has no {selection.file}: the series' file only")
    else:
        results = {side.name: checked_run(project, runner, upstream, selection, side, workdir, tag)
                   for side in sides}
        unpatched, patched = results["unpatched"].outcomes, results["patched"].outcomes
        seen = {**unpatched, **patched}
        print(format_table(selection.label, unpatched, patched))
        for name in SIDES:
            print(f"  {name}: {_summary_line(results[name].log)}  (log: {results[name].log})")
        if not seen:
            print("  no test of upstream's file ran on either side (check the file and -k selection)")
        changes = declared_changes(project)
        bad = regressions(unpatched, patched)
        problems += [t for t in bad if t not in changes]
        print_ids("patched regressions", problems)
        declared = [t for t in bad if t in changes]
        if declared:
            print(f"  failing patched as the series changes them on purpose (patches/{CHANGES_FILE}): "
                  f"{len(declared)}")
            for test_id in declared:
                print(f"    {test_id}: {changes[test_id]}")
        print_ids("fixed by the series", fixed_by_series(unpatched, patched))
    if checkout is None:
        return problems
    ours = checkout / selection.file
    if original is not None and ours.read_bytes() == original.read_bytes():
        print("  the series' file: upstream's, unchanged")
        return problems
    patched_side = next(side for side in sides if side.name == "patched")
    result = checked_run(project, runner, checkout, selection, patched_side, workdir, tag + "-series")
    new = sorted(set(result.outcomes) - set(seen))
    failing = series_failures(result.outcomes)
    print(f"  the series' file, patched: {format_counts(result.outcomes)}  (log: {result.log})")
    print_ids("the series' tests failing", failing, new)
    # hundreds for test_fake_tensor.py and test_meta.py: listed in a file beside the logs
    listing = result.log.with_name(result.log.name.replace(".log", "-only.txt"))
    listing.write_text("".join(f"{test_id}\n" for test_id in new))
    print(f"  only in the series' file: {len(new)}" + (f"  (listed in {listing})" if new else ""))
    return problems + failing


def prepare_for_checkout(project: Project, runner: Runner, python: Optional[Path]) -> None:
    """As `run` does before its tests: torch_overlay/ from base + series (the MANIFEST names the
    modules the checkout's files replace) and, for the project .venv, the hook that loads it."""
    written = ensure_overlay(project, runner)
    print(f"overlay:  {'wrote ' + ', '.join(written) if written else 'up to date'}", flush=True)
    if python is None:
        install_project_venv(project, runner)


def cmd_upstream_tests(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    checkout = Path(args.checkout).resolve() if args.checkout else fresh_patched_checkout(project, runner)
    if args.files:
        selections: Sequence[Selection] = [parse_selection(f, args.keyword) for f in args.files]
    else:
        selections = DEFAULT_SELECTIONS
    python = None
    if args.python is not None:
        python = Path(os.path.abspath(os.path.expanduser(args.python)))  # venv pythons are symlinks
        if not python.exists():
            raise PatchsetError(f"no interpreter at {python}")
        if python == Path(os.path.abspath(project.venv_python)):
            python = None
    if args.checkout and project.series_file.is_file():
        prepare_for_checkout(project, runner, python)
    return run_upstream_tests(project, runner, checkout, selections, python,
                              checkout_modules=args.checkout is not None)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "upstream-tests", cmd_upstream_tests,
        help="run upstream test files against the patched and the unpatched torch, side by side",
    )
    parser.add_argument("--checkout", metavar="DIR",
                        help="a PyTorch 1.13.1 checkout with the series applied (`apply --checkout "
                             "DIR`), maybe edited since: its test files, the series' versions, run "
                             "on the patched side, which imports its own torch/ files for the "
                             "modules the series changes; torch_overlay/ and the .venv hook are "
                             "made first, as `run` does (default: .cache/patched-checkout when it "
                             "holds the current series, with torch_overlay/). Upstream's unmodified "
                             "test files always come from the pristine .cache/checkout")
    parser.add_argument(
        "--files", nargs="+", metavar="FILE",
        help="test files relative to the checkout, optionally with ::node suffixes "
        "(default: " + ", ".join(s.label for s in DEFAULT_SELECTIONS) + ")",
    )
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="pytest -k expression for --files")
    parser.add_argument(
        "--python", metavar="PATH",
        help="interpreter of a venv with pip's torch==1.13.1 after `install --python PATH` (e.g. "
        ".venv-pip/bin/python): patched as installed, unpatched through an import hook onto the "
        "pristine base files (default: the project .venv with and without its hook)",
    )
