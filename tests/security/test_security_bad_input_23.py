"""Issue 23, items 2 and 5: ordinary bad input is one `error:` line and a hint with exit 2,
never exit 70 (a `--crd` file whose schema is no JSON Schema, `rehearse --logs FILE`), and
`rehearse --logs DIR` never writes through a link planted in DIR."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import Result

from conftest import ROOT, run, upstream_crd
from runai_spec.check.crd import crd_findings
from runai_spec.errors import InputError
from runai_spec.rehearse.logs_folder import check_logs_dir

MULTI = str(ROOT / "examples" / "multi-node" / "profile.yaml")
SINGLE = str(ROOT / "examples" / "single-gpu" / "profile.yaml")
SPEC = "spec.versions[0].schema.openAPIV3Schema"


def one_line_and_a_hint(result: Result, where: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {where}"), result.stderr
    assert "\nhint: " in result.stderr
    return errors[0]


def crd_with(tmp_path: Path, change: Any) -> Path:
    crd = copy.deepcopy(upstream_crd())
    version = crd["spec"]["versions"][0]
    change(version["schema"]["openAPIV3Schema"])
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    return path


def _spec(schema: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = schema["properties"]["spec"]
    return spec


CRD_BREAKS = {
    "a bad schema type": (
        lambda s: _spec(s)["properties"]["runPolicy"].update(type="foo"),
        f"{SPEC}.properties.spec.properties.runPolicy.type",
        "is no valid schema",
    ),
    "a $ref loop": (
        lambda s: _spec(s).update({"$ref": "#/properties/spec"}),
        f"{SPEC}.properties.spec.$ref",
        "uses $ref",
    ),
    "a $ref to the root": (lambda s: s.update({"$ref": "#"}), f"{SPEC}.$ref", "uses $ref"),
    "an invalid regex": (
        lambda s: s["properties"]["metadata"].update(
            {"properties": {"name": {"type": "string", "pattern": "(["}}}
        ),
        f"{SPEC}.properties.metadata.properties.name.pattern",
        "is no valid schema",
    ),
    "a required that is no list": (
        lambda s: _spec(s).update(required="runPolicy"),
        f"{SPEC}.properties.spec.required",
        "is no valid schema",
    ),
    "a length that is no number": (
        lambda s: s["properties"]["metadata"].update(
            {"properties": {"name": {"type": "string", "maxLength": "x"}}}
        ),
        f"{SPEC}.properties.metadata.properties.name.maxLength",
        "is no valid schema",
    ),
}


@pytest.mark.parametrize("case", sorted(CRD_BREAKS))
def test_a_crd_whose_schema_is_no_json_schema_is_bad_input(tmp_path: Path, case: str) -> None:
    change, field, what = CRD_BREAKS[case]
    crd = crd_with(tmp_path, change)
    line = one_line_and_a_hint(run("validate", MULTI, "--crd", str(crd)), f"{crd}: {field}: ")
    assert what in line


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"spec": {"type": "foo"}}},
        {"type": "object", "properties": {"spec": {"$ref": "#/properties/spec"}}},
        {"type": "object", "properties": {"metadata": {"properties": {"name": {"pattern": "(["}}}}},
    ],
)
def test_an_unchecked_schema_that_cannot_be_used_is_bad_input(schema: dict[str, Any]) -> None:
    """A schema that did not come through crd_schemas (a caller's own) is still bad input."""
    job = yaml.safe_load((ROOT / "examples" / "multi-node" / "manifest.yaml").read_text())
    with pytest.raises(InputError, match="the CRD's schema cannot be used"):
        crd_findings([job], {"v1": schema}, "PyTorchJob", "p.yaml")


def test_the_upstream_crd_is_a_valid_schema(tmp_path: Path) -> None:
    crd = crd_with(tmp_path, lambda s: None)
    result = run("validate", MULTI, "--crd", str(crd))
    assert result.exit_code == 0, result.output


# --- rehearse --logs ---------------------------------------------------------------------


def test_rehearse_logs_naming_a_file_is_bad_input(tmp_path: Path) -> None:
    file = tmp_path / "afile"
    file.write_text("mine\n")
    line = one_line_and_a_hint(run("rehearse", SINGLE, "--logs", str(file)), f"{file}: --logs: ")
    assert line.endswith("is not a folder") and file.read_text() == "mine\n"


def test_rehearse_logs_under_a_file_is_bad_input(tmp_path: Path) -> None:
    file = tmp_path / "afile"
    file.write_text("mine\n")
    result = run("rehearse", SINGLE, "--logs", str(file / "logs"))
    assert result.exit_code == 2 and "internal error" not in result.output, result.output


@pytest.mark.parametrize(
    "planted", ["result.json", "pods.json", "master-0", "master-0/log", "preflight", "volumes/ckpt"]
)
def test_rehearse_never_writes_through_a_link_planted_in_its_logs_folder(
    tmp_path: Path, planted: str
) -> None:
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("precious\n")
    logs = tmp_path / "logs"
    link = logs / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(
        precious if "/" not in planted or planted.startswith("volumes") else precious / "keep.txt"
    )
    before = sorted(p.name for p in logs.rglob("*"))
    line = one_line_and_a_hint(
        run("rehearse", SINGLE, "--logs", str(logs)), f"{logs.resolve() / planted}: --logs: "
    )
    assert "is a link that leads out of the folder" in line
    assert sorted(p.name for p in precious.iterdir()) == ["keep.txt"]
    assert (precious / "keep.txt").read_text() == "precious\n"
    assert sorted(p.name for p in logs.rglob("*")) == before  # nothing written, nothing run


def test_rehearse_refuses_a_hard_link_or_a_fifo_in_its_logs_folder(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    other = tmp_path / "other.txt"
    other.write_text("other\n")
    os.link(other, logs / "result.json")
    with pytest.raises(InputError, match="is a hard link"):
        check_logs_dir(logs)
    (logs / "result.json").unlink()
    os.mkfifo(logs / "network.log")
    with pytest.raises(InputError, match="is not a file or a folder"):
        check_logs_dir(logs)


def test_a_link_that_stays_inside_the_logs_folder_and_the_pods_image_copies_are_fine(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "volumes" / "ckpt" / "step-10").mkdir(parents=True)
    (logs / "volumes" / "ckpt" / "latest").symlink_to("step-10")
    (logs / "master-0" / "image").mkdir(parents=True)
    (logs / "master-0" / "image" / "python").symlink_to("/usr/bin/python3")  # the tree's own
    check_logs_dir(logs)
    check_logs_dir(tmp_path / "missing")
    check_logs_dir(None)
