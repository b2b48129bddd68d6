"""The series' topic stacks, `patches/stacks.json`: named contiguous runs of `patches/series`.

    {"stacks": [{"name": "core", "fixes": "one line", "needs": [], "patches": ["0001-....patch"]},
                {"name": "threads", "fixes": "...", "needs": ["core"], "patches": [...]}]}

Every patch of the series is in exactly one stack; each stack is a contiguous run of the series,
listed in series order; `needs` names only stacks listed before it; names are unique
`[a-z][a-z0-9-]*`; the first stack is `core` and needs nothing. `load_stacks` checks all of it
and names every problem. A selection (`--stack a,b`) is closed over `needs` by `with_needs` (for
`check`) or refused by `missing_needs` (for `export`); either way patches go in series order.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .common import PatchsetError, Project, read_series

STACKS_FILE = "stacks.json"
NAME = re.compile(r"^[a-z][a-z0-9-]*$")
FIRST = "core"
KEYS = ("name", "fixes", "needs", "patches")


@dataclasses.dataclass(frozen=True)
class Stack:
    name: str
    fixes: str
    needs: Tuple[str, ...]
    patches: Tuple[str, ...]  # patch file names, in series order


def entry_problems(index: int, entry: object) -> List[str]:
    """What is wrong with the shape of one entry of "stacks" (keys and their types)."""
    where = f"stack #{index + 1}"
    if not isinstance(entry, dict):
        return [f"{where} is not an object"]
    if sorted(entry) != sorted(KEYS):
        return [f"{where} must have exactly the keys {', '.join(KEYS)} (has {', '.join(sorted(entry))})"]
    problems = []
    if not isinstance(entry["name"], str) or not NAME.match(entry["name"]):
        problems.append(f"{where}: name {entry['name']!r} is not of the form [a-z][a-z0-9-]*")
    if not isinstance(entry["fixes"], str) or not entry["fixes"].strip() or "\n" in entry["fixes"]:
        problems.append(f"{where}: fixes must be one non-empty line")
    for key in ("needs", "patches"):
        if not isinstance(entry[key], list) or not all(isinstance(x, str) for x in entry[key]):
            problems.append(f"{where}: {key} must be a list of strings")
    return problems


def parse_stacks(data: object) -> List[Stack]:
    """Stacks from the decoded JSON; PatchsetError listing every shape problem."""
    if not isinstance(data, dict) or sorted(data) != ["stacks"] or not isinstance(data["stacks"], list):
        raise PatchsetError('must be {"stacks": [...]}')
    problems = [p for i, entry in enumerate(data["stacks"]) for p in entry_problems(i, entry)]
    if problems:
        raise PatchsetError("; ".join(problems))
    return [Stack(e["name"], e["fixes"], tuple(e["needs"]), tuple(e["patches"])) for e in data["stacks"]]


def order_problems(stacks: Sequence[Stack], series: Sequence[str]) -> List[str]:
    """The rules against the series: coverage, contiguity, order, needs, names, `core` first."""
    problems: List[str] = []
    if not stacks or stacks[0].name != FIRST or stacks[0].needs:
        problems.append(f"the first stack must be named {FIRST!r} and need nothing")
    seen: Dict[str, int] = {}
    for stack in stacks:
        if stack.name in seen:
            problems.append(f"stack name {stack.name!r} is used twice")
        unknown = [n for n in stack.needs if n not in seen]
        if unknown:
            problems.append(f"stack {stack.name!r} needs {', '.join(unknown)}, not a stack listed before it")
        seen.setdefault(stack.name, len(seen))
        if not stack.patches:
            problems.append(f"stack {stack.name!r} has no patch")
    owner: Dict[str, str] = {}
    for stack in stacks:
        for patch in stack.patches:
            if patch in owner:
                problems.append(f"{patch} is in stack {owner[patch]!r} and in {stack.name!r}")
            owner.setdefault(patch, stack.name)
    problems += [f"{p} is in stack {owner[p]!r} but not in patches/series" for p in owner if p not in series]
    problems += [f"{p} of patches/series is in no stack" for p in series if p not in owner]
    if not problems and [p for s in stacks for p in s.patches] != list(series):
        problems.append(run_problem(stacks, series))
    return problems


def run_problem(stacks: Sequence[Stack], series: Sequence[str]) -> str:
    """Why the stacks, read in order, are not the series: the first stack out of place."""
    start = 0
    for stack in stacks:
        if list(series[start:start + len(stack.patches)]) != list(stack.patches):
            return (f"stack {stack.name!r} is not the contiguous run of patches/series that follows "
                    "the stacks before it (stacks are listed in series order, each a contiguous run)")
        start += len(stack.patches)
    return "the stacks do not cover patches/series in order"


def check_stacks(stacks: Sequence[Stack], series: Sequence[str]) -> None:
    problems = order_problems(stacks, series)
    if problems:
        raise PatchsetError("; ".join(problems))


def load_stacks(project: Project) -> List[Stack]:
    """patches/stacks.json, checked against patches/series; PatchsetError naming every problem."""
    path = project.patches / STACKS_FILE
    if not path.is_file():
        raise PatchsetError(f"{path} is missing: the series has no stacks to select from")
    try:
        stacks = parse_stacks(json.loads(path.read_text()))
        check_stacks(stacks, [p.name for p in read_series(project)])
    except ValueError as exc:
        raise PatchsetError(f"{path} is not JSON: {exc}") from exc
    except PatchsetError as exc:
        raise PatchsetError(f"{path}: {exc}") from exc
    return stacks


def select(stacks: Sequence[Stack], text: str) -> List[Stack]:
    """The stacks named by `a,b` (in series order); unknown names refused, naming the known ones."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    known = {s.name for s in stacks}
    unknown = [n for n in names if n not in known]
    if not names or unknown:
        raise PatchsetError(f"no stack named {', '.join(unknown) or repr(text)}; "
                            f"stacks: {', '.join(s.name for s in stacks)}")
    return [s for s in stacks if s.name in names]


def needed_names(stacks: Sequence[Stack], chosen: Sequence[Stack]) -> List[str]:
    """Names of `chosen` and every stack they need, transitively, in series order."""
    by_name: Mapping[str, Stack] = {s.name: s for s in stacks}
    wanted = set()
    todo = [s.name for s in chosen]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += by_name[name].needs
    return [s.name for s in stacks if s.name in wanted]


def with_needs(stacks: Sequence[Stack], chosen: Sequence[Stack]) -> List[Stack]:
    names = needed_names(stacks, chosen)
    return [s for s in stacks if s.name in names]


def missing_needs(stacks: Sequence[Stack], chosen: Sequence[Stack]) -> List[str]:
    """Stacks the chosen ones need (transitively) that are not chosen, in series order."""
    names = {s.name for s in chosen}
    return [n for n in needed_names(stacks, chosen) if n not in names]


def refuse_missing(stacks: Sequence[Stack], chosen: Sequence[Stack]) -> Optional[str]:
    missing = missing_needs(stacks, chosen)
    if not missing:
        return None
    wanted = ",".join(needed_names(stacks, chosen))
    return (f"the selected stacks need {', '.join(missing)}, not selected; nothing written "
            f"(select them too: --stack {wanted})")


def stack_patches(project: Project, chosen: Sequence[Stack]) -> List[Path]:
    """The patch files of the chosen stacks, in series order."""
    return [project.patches / name for stack in chosen for name in stack.patches]


def dependency_map(chosen: Sequence[Stack]) -> List[str]:
    """One line per stack: `name <- the stacks it needs` (`name` alone when it needs nothing)."""
    return [stack.name + (f" <- {', '.join(stack.needs)}" if stack.needs else "") for stack in chosen]
