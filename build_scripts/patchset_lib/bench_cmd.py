"""`patchset bench`: run the memoization benchmark (test/bench_memo.py), unpatched vs patched.

The benchmark drives its own workers; this command only checks that the pieces exist and
starts it with the project venv's python, forwarding the options.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Optional

from .common import PatchsetError, Project, Runner, add_command, check_script
from .overlay_hook import check_overlay_hook
from .project_venv import check_project_venv

BENCH_SCRIPT = "bench_memo.py"


def bench_script(project: Project) -> Path:
    return project.tests / BENCH_SCRIPT


def check_python(path: Optional[str], option: str) -> Optional[str]:
    if path is not None and not Path(path).is_file():
        return f"{option} {path}: no such file"
    return None


def forwarded_args(args: argparse.Namespace) -> List[str]:
    argv: List[str] = []
    if args.quick:
        argv.append("--quick")
    if args.repeats is not None:
        argv += ["--repeats", str(args.repeats)]
    if args.workloads:
        argv += ["--workloads", args.workloads]
    if args.long:
        argv.append("--long")
    if args.l_traces is not None:
        argv += ["--l-traces", str(args.l_traces)]
    if args.json:
        argv += ["--json", str(Path(args.json).resolve())]
    for option, value in (
        ("--python-unpatched", args.python_unpatched),
        ("--python-patched", args.python_patched),
        ("--vs-python", args.vs_python),
    ):
        if value:
            argv += [option, str(Path(value).absolute())]
    return argv


def run_bench(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    checks = [check_script(bench_script(project), "benchmark script"), check_project_venv(project),
              check_python(args.python_unpatched, "--python-unpatched"),
              check_python(args.python_patched, "--python-patched"),
              check_python(args.vs_python, "--vs-python")]
    if not (args.python_unpatched and args.python_patched):
        checks.append(check_overlay_hook(project))
    errors = [error for error in checks if error]
    if errors:
        raise PatchsetError("; ".join(errors))
    argv = [str(project.venv_python), str(bench_script(project)), *forwarded_args(args)]
    # The figures are the product: stream them, and report failure through the exit code.
    proc = runner.run(argv, cwd=project.root, check=False)
    return proc.returncode


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "bench", run_bench,
        help="benchmark the memoization of unpatched vs patched torch (test/bench_memo.py)",
        description="Run test/bench_memo.py with the project venv: each workload in fresh "
        "subprocesses, unpatched (PATCHSET_OVERLAY=0) and patched (PATCHSET_OVERLAY=1) "
        "alternating, printing one table per workload with PASS/MISS next to the targets.",
    )
    parser.add_argument("--quick", action="store_true", help="scaled-down smoke run")
    parser.add_argument("--repeats", type=int, help="alternating repeats per runtime (default 2)")
    parser.add_argument("--workloads",
                        help="comma-separated subset of R1,R2,R3,R4,R5,M1,M2,M3,T1,T2,T3,D1,D2,"
                             "D3,D4,Z1,W1,W2,W3,W3v,W4,F1,S1,S2,S3,L1,L2,L3 (default: all but "
                             "D1-D4, torchdynamo "
                             "compiles that need pip venvs: --python-unpatched/--python-patched, Z1, "
                             "the torchvision model zoo, S3, the crash stress, and L1-L3, one "
                             "process tracing over and over: 2,000 patched traces and 100 on the "
                             "other sides, L3 500 and 20; L3 needs the pip venvs)")
    parser.add_argument("--long", action="store_true",
                        help="L1 only: 10,000 patched make_fx traces in one process, once")
    parser.add_argument("--l-traces", type=int, metavar="N",
                        help="traces per L row on every side instead of the defaults")
    parser.add_argument("--json", help="also write the raw results to this file")
    parser.add_argument("--python-unpatched", help="python of the unpatched runtime")
    parser.add_argument("--python-patched", help="python of the patched runtime")
    parser.add_argument("--vs-python", metavar="PATH",
                        help="a third runtime to compare with, e.g. a torch 2.x venv's python")
