"""The engineer's first day (issue 26 item 4, the small points): `presets list` shows the
grants, `presets show site` works, `presets verify` says a failing site file once, and a
re-approval keeps (or is told about) the expiry; an expiry already past is refused."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from conftest import run
from runai_spec.load.registry import PresetRegistry


def test_presets_list_shows_which_projects_each_preset_is_granted_to() -> None:
    listing = run("presets", "list")
    assert listing.exit_code == 0, listing.output
    lines = {ln.split()[0]: ln for ln in listing.stdout.splitlines()}
    assert lines["h200-1gpu"].endswith("granted to every project")
    assert lines["h200-2x8-ib"].endswith("granted to nlp-lab, team-a")
    assert lines["h200-8gpu"].endswith("granted to nlp-lab, team-a, vision-lab")


def test_presets_list_without_grants_grants_every_project(presets_dir: Path) -> None:
    registry = PresetRegistry(presets_dir)
    from runai_spec.outputs.report import granted_to

    assert granted_to(None, "h200-2x8-ib") == "every project"
    assert granted_to({"a": ["x"]}, "h200-2x8-ib") == "no project"
    assert granted_to({"a": ["*"], "b": ["x"]}, "h200-2x8-ib") == "a"
    assert registry.site().grants is not None


def test_presets_show_site_shows_the_site_file_and_its_approval() -> None:
    show = run("presets", "show", "site")
    assert show.exit_code == 0, show.output
    assert show.stdout.startswith('name: "site"\n')
    assert 'approved_by: "scc-ai-engineers"' in show.stdout and "grants:" in show.stdout


def test_verify_says_a_failing_site_file_once(presets_dir: Path) -> None:
    site = presets_dir / "site.yaml"
    site.write_text(site.read_text() + "# edited\n")
    result = run("presets", "verify", "--dir", str(presets_dir))
    assert result.exit_code == 1
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert errors == [
        f"error: {site}: sha256: edited since it was approved (sha256 differs from the ledger)"
    ], result.stderr


def _approve(presets_dir: Path, key: Path, *extra: str) -> tuple[int, str]:
    result = run("presets", "approve", "h200-8gpu", "--key", str(key), "--dir", str(presets_dir), *extra)
    return result.exit_code, result.stderr


def test_a_reapproval_keeps_the_expiry_and_says_so(presets_dir: Path, engineer_key: Path) -> None:
    before = PresetRegistry(presets_dir).get("h200-8gpu").approval.expires
    assert before is not None
    code, said = _approve(presets_dir, engineer_key)
    assert code == 0, said
    assert f"expires {before} (kept from the earlier approval" in said
    assert PresetRegistry(presets_dir).get("h200-8gpu").approval.expires == before
    code, said = _approve(presets_dir, engineer_key, "--expires", "never")
    assert code == 0 and "expires" not in said, said
    assert PresetRegistry(presets_dir).get("h200-8gpu").approval.expires is None


def test_an_expiry_in_the_past_is_refused(presets_dir: Path, engineer_key: Path) -> None:
    ledger = (presets_dir / "approvals.yaml").read_bytes()
    yesterday = (dt.date.today() - dt.timedelta(days=1)).isoformat()
    code, said = _approve(presets_dir, engineer_key, "--expires", yesterday)
    assert code == 2 and said.startswith(f"error: --expires: {yesterday} has passed"), said
    assert (presets_dir / "approvals.yaml").read_bytes() == ledger  # nothing recorded
    today = dt.date.today().isoformat()
    assert _approve(presets_dir, engineer_key, "--expires", today)[0] == 0


def test_an_earlier_expiry_that_has_passed_must_be_given_anew(presets_dir: Path, engineer_key: Path) -> None:
    path = presets_dir / "approvals.yaml"
    text = path.read_text()
    start = text.index("  h200-8gpu.yaml:")
    end = text.index('expires: "', start)
    path.write_text(text[:end] + 'expires: "2020-01-01"' + text[end + len('expires: "2027-12-31"') :])
    code, said = _approve(presets_dir, engineer_key)
    assert code == 2, said
    assert "the earlier approval of h200-8gpu expired on 2020-01-01" in said
    assert "--expires never" in said
    assert _approve(presets_dir, engineer_key, "--expires", "2099-12-31")[0] == 0
