"""Where each patch stands upstream: patches/upstream-status.json, keyed by patch subject.

Each value is {"forwarded": "no" | "not-needed", "why": one sentence, "later_torch": one line
(fixed the same way / fixed differently / still open, with where), optionally "follows": the
upstream PR the patch follows up, "bug": [verified issue URLs]}. The quilt export turns it into
DEP-3 fields (Forwarded, Bug) and the Description's last paragraph; the git export's cover
letter lists "later_torch" per patch. `lint` refuses a series patch without an entry, an entry
for no patch, and any unknown key or value.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List, Mapping, Sequence

from .common import PatchsetError, Project, read_series

STATUS_FILE = "upstream-status.json"
FORWARDED = ("no", "not-needed")
REQUIRED = ("forwarded", "why", "later_torch")
OPTIONAL = ("follows", "bug")
URL = re.compile(r"https://\S+")


def status_file(project: Project) -> Path:
    return project.patches / STATUS_FILE


def patch_subject(patch: Path) -> str:
    """The Subject: header of a format-patch file, unfolded, without its `[PATCH ...]` tag."""
    header = patch.read_text().split("\n\n", 1)[0]
    match = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", header, flags=re.M)
    if match is None:
        raise PatchsetError(f"{patch.name} has no Subject: header")
    return re.sub(r"^\[PATCH[^\]]*\]\s*", "", re.sub(r"\n[ \t]+", " ", match.group(1)))


def series_subjects(project: Project) -> List[str]:
    return [patch_subject(p) for p in read_series(project)]


def entry_problems(subject: str, entry: object) -> List[str]:
    if not isinstance(entry, dict):
        return [f"{subject!r}: not an object"]
    problems = [f"{subject!r}: unknown key {k!r}" for k in entry if k not in (*REQUIRED, *OPTIONAL)]
    problems += [f"{subject!r}: missing {k!r}" for k in REQUIRED if k not in entry]
    if entry.get("forwarded", FORWARDED[0]) not in FORWARDED:
        problems.append(f"{subject!r}: forwarded is {entry['forwarded']!r}, not one of {', '.join(FORWARDED)}")
    for key in ("why", "later_torch"):
        value = entry.get(key, "x")
        if not isinstance(value, str) or not value.strip() or "\n" in value:
            problems.append(f"{subject!r}: {key} must be one non-empty line")
    if "follows" in entry and not (isinstance(entry["follows"], str) and URL.fullmatch(entry["follows"])):
        problems.append(f"{subject!r}: follows must be one https:// URL")
    bugs = entry.get("bug", [])
    if not isinstance(bugs, list) or not all(isinstance(b, str) and URL.fullmatch(b) for b in bugs):
        problems.append(f"{subject!r}: bug must be a list of https:// URLs")
    return problems


def status_problems(status: Mapping[str, object], subjects: Sequence[str]) -> List[str]:
    problems = [f"no entry for {s!r}" for s in subjects if s not in status]
    problems += [f"entry {s!r} names no patch of patches/series" for s in status if s not in subjects]
    return problems + [p for s, entry in status.items() for p in entry_problems(s, entry)]


def read_status(project: Project) -> Dict[str, dict]:
    path = status_file(project)
    if not path.is_file():
        raise PatchsetError(f"{path} is missing (one entry per patch subject: {', '.join(REQUIRED)})")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise PatchsetError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PatchsetError(f"{path} must hold an object keyed by patch subject")
    return data


def checked_status(project: Project) -> Dict[str, dict]:
    """patches/upstream-status.json, refused with every problem named unless it fits the series."""
    status = read_status(project)
    problems = status_problems(status, series_subjects(project))
    if problems:
        raise PatchsetError(f"{status_file(project)}: " + "; ".join(problems))
    return status


def description_paragraph(entry: Mapping[str, object]) -> str:
    """The DEP-3 Description's last paragraph: why not forwarded, later torch, what it follows."""
    lines = [f"Upstream: {entry['why']}", f"Later torch: {entry['later_torch']}"]
    if "follows" in entry:
        lines.append(f"Follows up {entry['follows']}")
    return "\n".join(lines)


def later_torch_section(status: Mapping[str, Mapping[str, object]], subjects: Sequence[str]) -> str:
    """The cover letter's "Later torch, per patch" section, in series order."""
    return "Later torch, per patch:\n" + "".join(
        f"  {n:04d} {s} \u2014 {status[s]['later_torch']}\n" for n, s in enumerate(subjects, 1))
