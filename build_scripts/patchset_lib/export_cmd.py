"""`patchset export --format git|quilt --out DIR`: the series for a PR or for a Debian package;
`export --debian-patches DIR`: the quilt export dropped into a package's debian/patches;
`export --conda-forge DIR`: the git patches without cover letter and a meta.yaml fragment.

Both formats start the same way: a temp repo holding the pristine base files (one commit with a
fixed identity, see `series_io.make_base_repo`; the files come from .cache/pristine, else from
the verified orig tarball as `pristine` takes it: no `setup` needed), `git am` of patches/ (or,
with `--stack`, of the selected stacks' patches, whose needs must all be selected) on top, then
every commit whose author is a placeholder gets the author of record (see `authorship`:
patches/author.json if a maintainer set one, else patches/identity.json's) as author and
committer, and with `--signed-off-by` every commit that person's `Signed-off-by:` trailer, so
the result depends on patches/ and those options and nothing else of the machine, the git
config of whoever runs it or the clock.

git: `git format-patch --cover-letter --from=<author>`, numbered `[PATCH n/m]`, for `git am` on
a v1.13.1 checkout. The cover letter's subject and blurb come from patches/cover-letter.txt
(first paragraph = subject, the rest = blurb) through the branch description, followed by a
generated paragraph naming the base (tag v1.13.1) and the sha256 of the base files, and ends
with `base-commit: <upstream's v1.13.1 commit>` (patches/base.json), which b4 and GitHub resolve.
With `--stack` the cover letter is the stacks' own, one page: which stacks, what each fixes,
what each needs, the dependency map (`stack_cover`).

quilt: a `debian/patches` directory (`series` + one file per patch) whose patches carry DEP-3
headers before the diff. Per-patch DEP-3 metadata lives in the commit message as git trailers in
its last paragraph, so it travels with the commit through `git am`, rebases and `refresh`:
    Bug: https://github.com/pytorch/pytorch/issues/80544
(also Bug-Debian, Applied-Upstream). Those trailers move from the description into the header.
Where each patch stands upstream comes from patches/upstream-status.json (`upstream_status`):
Forwarded, more Bug: lines, and the Description's upstream paragraph. Origin (DEP-3's keyword
`other`: a third party's patches, not a distribution's) names the series by the full sha256 of
its patch files (no URL),
Last-Update is the patch's own date (the `Date:` of the patch file, which `refresh` sets when
the patch's diff changes; its commit's author date in the export's repo). `debian_dropin` puts these files into a
package's debian/patches after its own.

conda-forge: the git export's patches (conda-build applies each with `patch -p1`; the mail header
before the diff is ignored) and `meta.yaml`, a fragment listing them as `source: patches:` in
series order, to merge into a recipe building the pytorch 1.13.1 source.
"""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import series_io
from .authorship import Author, author_line, author_of_record, is_placeholder, parse_author
from .common import (
    add_command,
    PatchsetError,
    Project,
    Runner,
    base_pin,
    check_out_dir,
    raise_if,
    read_base_hashes,
    read_series,
    sha256_bytes,
)
from .debian_dropin import DEFAULT_SUBDIR, SERIES, plan_drop_in, write_drop_in
from .generated_tests import GENERATED_TESTS, check_tests
from .source import ensure_base_files
from .stacks import Stack, dependency_map, load_stacks, refuse_missing, select, stack_patches
from .upstream_status import checked_status, description_paragraph, later_torch_section, series_subjects

COVER_LETTER = "cover-letter.txt"
DEP3_TRAILERS = ("Bug", "Bug-Debian", "Forwarded", "Applied-Upstream")
GIT_EXPORT_OPTIONS: Sequence[str] = (
    "--zero-commit", "--no-signature", "--full-index", "--stat=80", "--numbered",
    "--cover-letter", "--cover-from-description=subject",
)
CONDA_META = "meta.yaml"


@dataclasses.dataclass(frozen=True)
class Job:
    """What one export writes: whose patches (author of record, signer) and which of them."""

    author: Author
    signer: Optional[Author]
    patches: Sequence[Path]
    stacks: Optional[Sequence[Stack]] = None  # None: the whole series


def check_series(series: Sequence[Path]) -> Optional[str]:
    if not series:
        return "patches/series lists no patch"
    missing = [p.name for p in series if not p.is_file()]
    return f"patches/series lists missing files: {', '.join(missing)}" if missing else None


def author_env(project: Project, author: Author) -> Dict[str, str]:
    """The series author as committer, at the fixed date: the export depends on nothing else."""
    return {**series_io.am_env(project), "GIT_COMMITTER_NAME": author.name,
            "GIT_COMMITTER_EMAIL": author.email}


def whole_series(project: Project) -> List[Path]:
    series = read_series(project) if project.series_file.is_file() else []
    raise_if(check_series(series))
    return series


def chosen_stacks(project: Project, text: Optional[str]) -> Optional[List[Stack]]:
    """The stacks of `--stack a,b`, refused (before anything is written) when they need a stack
    not selected; None without --stack."""
    if text is None:
        return None
    stacks = load_stacks(project)
    chosen = select(stacks, text)
    raise_if(refuse_missing(stacks, chosen))
    return chosen


def series_repo(project: Project, runner: Runner, workdir: Path, job: Job) -> Tuple[Path, str]:
    """Temp repo = pristine base commit + `git am` of the job's patches, placeholder authors
    replaced by the author of record, each commit signed off by the signer if given; returns
    (repo, base commit)."""
    repo = workdir / "repo"
    ensure_base_files(project, runner)
    base = series_io.make_base_repo(series_io.pristine_files(project), repo, runner)
    series_io.am_series(repo, job.patches, runner, series_io.am_env(project))
    series_io.reauthor(repo, base, lambda name, email: job.author if is_placeholder(email) else None,
                       runner, author_env(project, job.author),
                       [f"Signed-off-by: {job.signer}"] if job.signer is not None else [])
    if job.stacks is None:  # the generated test files are the whole series'
        warning = check_tests(project, series_io.read_files(repo, [p for p in GENERATED_TESTS
                                                                   if (repo / p).is_file()]))
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    return repo, base


# ---- git ---------------------------------------------------------------------------------------


def base_paragraph(project: Project) -> str:
    pin = base_pin(project)
    hashes = "".join(f"  {digest}  {path}\n" for path, digest in read_base_hashes(project).items())
    return (
        f"Base: PyTorch tag {pin['upstream_tag']} (the same files ship in Debian's source package "
        f"{pin['debian_source_package']} {pin['debian_source_version']}); the series touches "
        "only these files, whose sha256 in that tag are:\n" + hashes
    )


def cover_description(project: Project, status: Mapping[str, Mapping[str, object]]) -> str:
    path = project.patches / COVER_LETTER
    if not path.is_file():
        raise PatchsetError(f"{path} is missing (first paragraph: subject; then the blurb)")
    text = path.read_text().strip()
    if not text:
        raise PatchsetError(f"{path} is empty")
    return (text + "\n\n" + base_paragraph(project) + "\n"
            + later_torch_section(status, series_subjects(project)))


def stack_cover(project: Project, chosen: Sequence[Stack]) -> str:
    """The cover letter of a stack export: subject, then per stack what it fixes and needs, the
    dependency map and the base, one page."""
    tag = base_pin(project)["upstream_tag"]
    names = ", ".join(s.name for s in chosen)
    lines = [f"fake tensors for PyTorch {tag}: stack{'s' if len(chosen) > 1 else ''} {names}", "",
             f"The stack{'s' if len(chosen) > 1 else ''} {names} of the fake-tensor patch set "
             f"(patches/stacks.json), in series order, {sum(len(s.patches) for s in chosen)} patches:", ""]
    for stack in chosen:
        needs = ", ".join(stack.needs) or "nothing"
        lines += [f"  {stack.name} ({len(stack.patches)} patches; needs {needs}): {stack.fixes}"]
    lines += ["", "Dependency map (stack <- the stacks it needs):", ""]
    lines += [f"  {line}" for line in dependency_map(chosen)]
    lines += ["", f"Base: PyTorch tag {tag} (the files of patches/base.sha256); the whole series' "
              "cover letter is patches/cover-letter.txt."]
    return "\n".join(lines) + "\n"


def add_base_commit(cover: Path, commit: Optional[str]) -> None:
    """`base-commit:` as `format-patch --base` writes it, naming upstream's commit (the temp
    repo holds only the base files, so its own base commit means nothing to a reviewer)."""
    if commit:
        cover.write_text(cover.read_text().rstrip("\n") + f"\n\nbase-commit: {commit}\n")


def git_series(project: Project, runner: Runner, workdir: Path, job: Job) -> List[Path]:
    """The git export in workdir/git: the cover letter first, then the patches in series order."""
    status = checked_status(project)
    description = (cover_description(project, status) if job.stacks is None
                   else stack_cover(project, job.stacks))
    repo, base = series_repo(project, runner, workdir, job)
    runner.git("config", f"branch.{series_io.BRANCH}.description", description,
               cwd=repo, env=series_io.isolated_env(), capture=True)
    made = series_io.format_patches(repo, f"{base}..HEAD", workdir / "git", runner,
                                    [*GIT_EXPORT_OPTIONS, "--no-base", f"--from={job.author}"],
                                    author_env(project, job.author))
    add_base_commit(made[0], base_pin(project).get("upstream_commit"))
    return made


def export_git(project: Project, runner: Runner, workdir: Path, out: Path, job: Job) -> List[Path]:
    return copy_files(git_series(project, runner, workdir, job), out)


def copy_files(files: Sequence[Path], out: Path) -> List[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in files:
        shutil.copyfile(path, out / path.name)
        written.append(out / path.name)
    return written


# ---- conda-forge -------------------------------------------------------------------------------


def conda_meta_fragment(patches: Sequence[Path]) -> str:
    listed = "".join(f"    - {p.name}\n" for p in patches)
    return ("# meta.yaml fragment for a conda-forge recipe: the fake-tensor patch set in series order;\n"
            "# each patch applies with `patch -p1` to the pytorch 1.13.1 source.\n"
            "source:\n  patches:\n" + listed)


def export_conda(project: Project, runner: Runner, workdir: Path, out: Path, job: Job) -> List[Path]:
    patches = copy_files(git_series(project, runner, workdir, job)[1:], out)  # no cover
    (out / CONDA_META).write_text(conda_meta_fragment(patches))
    return [*patches, out / CONDA_META]


# ---- quilt -------------------------------------------------------------------------------------


def commit_meta(repo: Path, rev: str, runner: Runner) -> Dict[str, str]:
    """The commit's author, its date (the patch's `Date:`, YYYY-MM-DD) and its message parts."""
    fmt = "%an%x00%ae%x00%as%x00%s%x00%b%x00%(trailers:only,unfold)"
    out = runner.git("log", "-1", f"--format={fmt}", rev, cwd=repo, env=series_io.isolated_env(),
                     capture=True).stdout
    name, email, date, subject, body, trailers = out.split("\0")
    return {"name": name, "email": email, "date": date, "subject": subject, "body": body,
            "trailers": trailers}


def parse_trailers(text: str) -> List[Tuple[str, str]]:
    pairs = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            pairs.append((key.strip(), value.strip()))
    return pairs


def strip_trailers(body: str, drop: Sequence[Tuple[str, str]]) -> str:
    """The body without the DEP-3 trailer lines of its last paragraph."""
    paragraphs = body.strip("\n").split("\n\n")
    if drop and paragraphs:
        unwanted = {f"{k}: {v}" for k, v in drop}
        kept = [line for line in paragraphs[-1].splitlines() if line.strip() not in unwanted]
        paragraphs[-1] = "\n".join(kept)
    return "\n\n".join(p for p in paragraphs if p.strip())


def description_field(subject: str, body: str) -> str:
    lines = [f"Description: {subject}"]
    for line in body.splitlines():
        lines.append(" " + line if line.strip() else " .")
    return "\n".join(lines) + "\n"


def dep3_header(meta: Mapping[str, str], origin: str, status: Mapping[str, object]) -> str:
    """DEP-3 fields from the commit (author, date, trailers) and its upstream-status entry
    (Forwarded, more Bug: lines, the Description's upstream paragraph); the commit's other
    trailers (Signed-off-by) stay a trailer block, the Description's last paragraph."""
    trailers = parse_trailers(meta["trailers"])
    dep3 = [(k, v) for k, v in trailers if k in DEP3_TRAILERS]
    others = "".join(f"{k}: {v}\n" for k, v in trailers if k not in DEP3_TRAILERS)
    bugs = [("Bug", url) for url in status.get("bug", []) if ("Bug", url) not in dep3]
    body = strip_trailers(meta["body"], trailers) + "\n\n" + description_paragraph(status)
    header = description_field(meta["subject"], body + ("\n\n" + others if others else ""))
    header += f"Author: {meta['name']} <{meta['email']}>\n"
    header += f"Origin: {origin}\n"
    for key in ("Bug", "Bug-Debian", "Applied-Upstream"):  # each trailer, several Bug: included
        header += "".join(f"{k}: {v}\n" for k, v in [*dep3, *bugs] if k == key)
    header += f"Forwarded: {status['forwarded']}\n"
    header += f"Last-Update: {meta['date']}\n"
    return header


def diff_part(patch_text: str) -> str:
    """What follows the `---` line ending the commit message: the diffstat and the diff."""
    lines = patch_text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.rstrip("\n") == "---":
            return "".join(lines[index + 1:])
    raise PatchsetError("format-patch output without a `---` separator")


def series_id(patches: Sequence[Path]) -> str:
    return sha256_bytes(b"".join(p.read_bytes() for p in patches))


def origin_text(project: Project, patches: Sequence[Path], stacks: Optional[Sequence[Stack]] = None) -> str:
    """DEP-3's `other` keyword: `vendor` is for patches made by Debian or another distribution."""
    tag = base_pin(project)["upstream_tag"]
    part = "" if stacks is None else f"stacks {', '.join(s.name for s in stacks)} of the "
    return f"other, {part}fake-tensor patch set for PyTorch {tag} (series sha256 {series_id(patches)})"


def export_quilt(project: Project, runner: Runner, workdir: Path, out: Path, job: Job) -> List[Path]:
    status = checked_status(project)
    repo, base = series_repo(project, runner, workdir, job)
    patches = series_io.format_series(repo, base, workdir / "canonical", runner)
    revs = runner.git("rev-list", "--reverse", f"{base}..HEAD", cwd=repo,
                      env=series_io.isolated_env(), capture=True).stdout.split()
    origin = origin_text(project, read_series(project), job.stacks)  # the series as patches/ holds it
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for rev, patch in zip(revs, patches):
        meta = commit_meta(repo, rev, runner)
        header = dep3_header(meta, origin, status[meta["subject"]])
        target = out / patch.name
        target.write_text(header + "---\n" + diff_part(patch.read_text()))
        written.append(target)
    (out / "series").write_text(series_io.series_text(patches))
    return written


def git_am_hint(out: Path, committer: Author) -> str:
    return (f"apply on a v1.13.1 git checkout (all but the cover letter; the -c options make "
            f"{committer} the committer, so a machine without a git identity works too):\n"
            f"  ls {out}/*.patch | grep -v /0000-cover-letter.patch | xargs git "
            f"{committer.git_config_args()} am")


def export_format(args: argparse.Namespace) -> str:
    if args.debian_patches is not None:
        raise_if("--debian-patches takes the quilt format only" if args.format == "git" else None)
        return "quilt"
    if args.conda_forge is not None:
        raise_if("--conda-forge takes the git format only" if args.format == "quilt" else None)
        return "conda-forge"
    raise_if("--out needs --format git or --format quilt" if args.format is None else None)
    return args.format


def export_job(project: Project, args: argparse.Namespace) -> Job:
    """Everything checked before a file is written: author, signer, stacks and their needs."""
    author, source = author_of_record(project)
    signer = None if args.signed_off_by is None else parse_author(args.signed_off_by, "--signed-off-by")
    stacks = chosen_stacks(project, args.stack)
    patches = whole_series(project) if stacks is None else stack_patches(project, stacks)
    print(author_line(author, source))
    if stacks is not None:
        print(f"stacks: {', '.join(s.name for s in stacks)} ({len(patches)} patches)")
    return Job(author, signer, patches, stacks)


def cmd_export(project: Project, runner: Runner, args: argparse.Namespace) -> int:
    fmt = export_format(args)
    job = export_job(project, args)
    if args.debian_patches is not None:
        return drop_into_debian_patches(project, runner, args, job)
    exporter = {"git": export_git, "quilt": export_quilt, "conda-forge": export_conda}[fmt]
    out = Path(args.out if args.conda_forge is None else args.conda_forge).resolve()
    raise_if(check_out_dir(out))
    with tempfile.TemporaryDirectory(prefix="patchset-export-") as tmp:
        staged = Path(tmp) / "out"  # written in full before anything reaches --out
        files = exporter(project, runner, Path(tmp), staged, job)
        shutil.copytree(staged, out, dirs_exist_ok=True)
    for path in files:
        print(out / path.name)
    if fmt == "git":
        print(git_am_hint(out, job.signer or job.author))
    elif fmt == "conda-forge":
        print(f"conda-forge: copy the patches beside the recipe's meta.yaml and merge {out / CONDA_META} "
              "into its `source:` (the pytorch 1.13.1 source); conda-build applies them in that "
              "order with `patch -p1`")
    else:
        print(f"apply: QUILT_PATCHES={out} quilt push -a (in the source tree); for a Debian "
              f"package: ./build_scripts/patchset export --debian-patches <package>/debian/patches")
    return 0


def drop_into_debian_patches(project: Project, runner: Runner, args: argparse.Namespace, job: Job) -> int:
    target = Path(args.debian_patches).resolve()
    with tempfile.TemporaryDirectory(prefix="patchset-export-") as tmp:
        files = export_quilt(project, runner, Path(tmp), Path(tmp) / "out", job)
        plan = plan_drop_in(target, args.subdir, {p.name: p.read_bytes() for p in files})
        write_drop_in(plan)
    if plan.changes_nothing:
        print(f"already in place: {target / args.subdir} holds the series and {target / SERIES} "
              "lists it; nothing changed")
        return 0
    for entry in plan.entries:
        print(target / entry)
    action = "appended" if plan.series_text is not None else "already listed"
    print(f"{target / SERIES}: {len(plan.entries)} entries {action} after the package's own; "
          "apply with `quilt push -a` (or dpkg-source -b / gbp pq import) in the package's tree")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(
        subparsers, "export", cmd_export,
        help="export the series for a PR (git), a Debian package (quilt) or a conda-forge recipe",
        description="Write the series as git format-patch files with a cover letter, or as a "
                    "debian/patches directory with DEP-3 headers (byte-reproducible), or drop the quilt patches into a package's debian/patches after "
                    "its own, or write the git patches with a meta.yaml fragment for a conda-forge recipe.",
    )
    parser.add_argument("--format", choices=["git", "quilt"],
                        help="required with --out; --debian-patches implies quilt, --conda-forge git")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", metavar="DIR", help="empty or new directory to write into")
    where.add_argument("--debian-patches", metavar="DIR",
                       help="a package's debian/patches (a quilt directory with a series file): "
                            "the patches go to DIR/SUBDIR/, their entries are appended to "
                            "DIR/series after the package's own; a second run changes nothing")
    where.add_argument("--conda-forge", metavar="DIR",
                       help="empty or new directory for a conda-forge recipe: the git patches "
                            "(no cover letter; `patch -p1`) and meta.yaml's `source: patches:` "
                            "listing them in series order")
    parser.add_argument("--subdir", default=DEFAULT_SUBDIR,
                        help=f"subdirectory of --debian-patches for the patches (default: {DEFAULT_SUBDIR})")
    parser.add_argument("--signed-off-by", metavar="'NAME <EMAIL>'",
                        help="add a `Signed-off-by:` trailer naming you to each exported patch "
                             "(the author is always the author of record: patches/author.json if "
                             "a maintainer set one with `patchset author set`, else the series' "
                             "own identity of patches/identity.json)")
    parser.add_argument("--stack", metavar="NAME[,NAME...]",
                        help="export only these stacks of patches/stacks.json, in series order "
                             "(the git export with their own short cover letter); refused, "
                             "writing nothing, when they need a stack not selected")
