"""`patchset overlay`: generated from pristine + series, MANIFEST, drift detection; `status`."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict

from conftest import FAKE, META, TEST, TmpProject, tree_hashes


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def flip_byte(path: Path, offset: int = 50) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_overlay_holds_changed_torch_files_and_manifest(
    tmp_project: TmpProject, good_series: Dict[str, bytes]
) -> None:
    proc = tmp_project.tool("overlay")
    assert proc.returncode == 0, proc.stderr

    files = tree_hashes(tmp_project.overlay)
    assert set(files) == {"MANIFEST", FAKE, META}  # test/ files are for checkouts only
    assert files[FAKE] == sha(good_series[FAKE]) and files[META] == sha(good_series[META])
    manifest = (tmp_project.overlay / "MANIFEST").read_text().splitlines()
    assert manifest == [
        f"{path} {sha(tmp_project.base[path])} {sha(good_series[path])}" for path in sorted([FAKE, META])
    ]

    again = tmp_project.tool("overlay")
    assert again.returncode == 0 and "up to date" in again.stdout
    assert tree_hashes(tmp_project.overlay) == files
    assert tmp_project.tool("overlay", "--check").returncode == 0


def test_unchanged_torch_file_is_not_in_overlay(tmp_project: TmpProject) -> None:
    only_test = [("Tests only", "Ada Author <ada@example.invalid>",
                  {TEST: lambda text: text + "# patchset-test: tests only\n"}, True)]
    tmp_project.make_series(only_test)
    assert tmp_project.tool("overlay").returncode == 0
    assert tree_hashes(tmp_project.overlay) == {"MANIFEST": sha(b"")}


def test_overlay_writes_the_generated_test_file_and_check_detects_edits(
    tmp_project: TmpProject, good_series: Dict[str, bytes]
) -> None:
    assert tmp_project.tool("overlay").returncode == 0
    generated = tmp_project.root / TEST
    assert generated.read_bytes() == good_series[TEST]
    generated.write_bytes(good_series[TEST] + b"# edited by hand\n")
    proc = tmp_project.tool("overlay", "--check")
    assert proc.returncode == 1
    assert f"{TEST} differs from pristine base + series" in proc.stderr
    assert tmp_project.tool("overlay").returncode == 0
    assert generated.read_bytes() == good_series[TEST]


def test_edited_overlay_file_is_detected_by_name(tmp_project: TmpProject, good_series: Dict[str, bytes]) -> None:
    assert tmp_project.tool("overlay").returncode == 0
    flip_byte(tmp_project.overlay / FAKE)

    proc = tmp_project.tool("overlay", "--check")
    assert proc.returncode == 1
    assert f"torch_overlay/{FAKE} differs" in proc.stderr

    assert tmp_project.tool("overlay").returncode == 0
    assert tmp_project.tool("overlay", "--check").returncode == 0
    assert sha((tmp_project.overlay / FAKE).read_bytes()) == sha(good_series[FAKE])


def test_stale_manifest_is_detected(tmp_project: TmpProject, good_series: Dict[str, bytes]) -> None:
    assert tmp_project.tool("overlay").returncode == 0
    manifest = tmp_project.overlay / "MANIFEST"
    manifest.write_text(manifest.read_text().replace(sha(good_series[META]), "0" * 64))

    proc = tmp_project.tool("overlay", "--check")
    assert proc.returncode == 1 and "torch_overlay/MANIFEST is stale" in proc.stderr


def test_missing_overlay_is_detected(tmp_project: TmpProject, good_series: Dict[str, bytes]) -> None:
    proc = tmp_project.tool("overlay", "--check")
    assert proc.returncode == 1 and "missing" in proc.stderr
    assert not tmp_project.overlay.exists()


def test_check_of_a_patched_checkout_names_the_drifting_test_file(
    tmp_project: TmpProject, good_series: Dict[str, bytes], plain_checkout: Path
) -> None:
    assert tmp_project.tool("overlay").returncode == 0
    assert tmp_project.tool("apply", "--checkout", str(plain_checkout)).returncode == 0
    assert tmp_project.tool("overlay", "--check", "--checkout", str(plain_checkout)).returncode == 0

    flip_byte(plain_checkout / TEST)
    proc = tmp_project.tool("overlay", "--check", "--checkout", str(plain_checkout))
    assert proc.returncode == 1 and f"{plain_checkout / TEST} differs" in proc.stderr


def test_status_reports_checkout_and_overlay(tmp_project: TmpProject, good_series: Dict[str, bytes]) -> None:
    checkout = tmp_project.write_tree(tmp_project.root / ".cache" / "checkout" / "pytorch-1.13.1")

    before = tmp_project.tool("status")
    assert before.returncode == 0, before.stderr
    assert "checkout:  pristine" in before.stdout and "overlay:   missing" in before.stdout

    assert tmp_project.tool("apply").returncode == 0
    assert tmp_project.tool("overlay").returncode == 0
    after = tmp_project.tool("status")
    assert "checkout:  patched" in after.stdout and "overlay:   fresh" in after.stdout
    assert sha((checkout / META).read_bytes()) == sha(good_series[META])
