"""Every bad-input error comes with a hint (red team: pattern, type and range errors of the
profile's fields printed pydantic's message alone). A name field that is not a Kubernetes
name says so in words, not as a regular expression."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from conftest import BASE_PROFILE, run


def errors_and_hints(stderr: str) -> list[tuple[str, str]]:
    lines = stderr.splitlines()
    return [
        (line, lines[i + 1] if i + 1 < len(lines) else "")
        for i, line in enumerate(lines)
        if line.startswith("error: ")
    ]


def test_every_schema_error_is_followed_by_a_hint(tmp_path: Path) -> None:
    data = copy.deepcopy(BASE_PROFILE)
    data["command"] = []
    data["working_dir"] = 7
    data["checkpoint"]["pvc"] = "1.10"
    data["batch"]["local"] = 0
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    result = run("validate", str(path))
    assert result.exit_code == 2, result.output
    pairs = errors_and_hints(result.stderr)
    fields = {line.split(": ")[2] for line, _ in pairs}
    assert {"command", "working_dir", "checkpoint.pvc", "batch.local"} <= fields, pairs
    assert all(hint.startswith("hint: ") for _, hint in pairs), pairs
    pvc = next(line for line, _ in pairs if ": checkpoint.pvc: " in line)
    assert "'1.10' is not a Kubernetes name" in pvc and "should match pattern" not in pvc
    assert ("hint: use '1-10'") in result.stderr


def test_the_loaders_own_refusals_name_the_field_and_give_a_hint(tmp_path: Path) -> None:
    for text, field, what in [
        ("name: demo\nmodel: {parameters: 1e309}\n", "model.parameters", "too large"),
        ('name: demo\nimage: "a\\x1bb"\n', "image", "control characters"),
        ("name: demo\nimage: !!str x\n", "image", "YAML tags"),
    ]:
        path = tmp_path / "profile.yaml"
        path.write_text(text, encoding="utf-8")
        result = run("validate", str(path))
        assert result.exit_code == 2, result.output
        ((line, hint),) = errors_and_hints(result.stderr)
        assert line.startswith(f"error: {path}:") and f": {field}: " in line and what in line
        assert hint.startswith("hint: "), result.stderr
