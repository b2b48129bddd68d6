"""Quick cross-reference (test/crossref.py) of ops that reached FakeTensorMode's fallback kernel.

Runs the script as `patchset crossref --quick` would, unpatched and patched side by side: in
1.13.1 these ops have no Meta kernel and run their CPU kernel through the fallback (out= results
with stale metadata); the series gives them Meta kernels, so the patched side reaches no
fallback and has no silent mismatch.
"""
import json
import subprocess
import sys
from pathlib import Path

CROSSREF = Path(__file__).resolve().parent / "crossref.py"
FALLBACK_OPS = ["kthvalue", "take", "histc", "bucketize", "median", "cummax", "searchsorted"]


def run_quick_crossref(tmp_path):
    out = tmp_path / "crossref.json"
    proc = subprocess.run(
        [sys.executable, str(CROSSREF), "--ops", ",".join(FALLBACK_OPS), "--quick",
         "--fail-on-mismatch", "--json", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    return proc, (json.loads(out.read_text()) if out.is_file() else None)


def test_quick_crossref_of_former_fallback_ops_has_no_patched_fallback_or_silent_mismatch(tmp_path):
    proc, sides = run_quick_crossref(tmp_path)
    assert sides is not None, proc.stderr[-2000:]
    patched = sides["patched"]
    assert {r["op"] for r in patched} == set(FALLBACK_OPS)
    assert {r["variant"] for r in patched} >= {"functional", "out"}
    assert [r for r in patched if r["fallback"]] == []
    assert any(r["fallback"] for r in sides["unpatched"])
    mismatches = [r for r in patched if r["class"] == "silent mismatch"]
    assert mismatches == [], proc.stdout
    # the same comparison finds the stale out= metadata of unpatched 1.13.1
    assert any(r["class"] == "silent mismatch" and r["variant"] == "out" for r in sides["unpatched"])
    assert proc.returncode == 0, proc.stdout
