"""A site of fifty presets (issue 41 item 1): the checks are written once per layout and launcher
family and each preset adds only its own values, so the policy stays within what the API server
stores; every tamper kind is still denied with all of them loaded."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, example_job
from outputs.admission.admission_policy import PROJECTS, Policy, documents, renders
from outputs.admission.many_presets import many_presets
from outputs.admission.test_admission_tampers import TAMPERS
from runai_spec.load.registry import PresetRegistry
from runai_spec.outputs.admission import documents as admission

pytest.importorskip("cel_expr_python.cel")
# one worker builds the fifty presets' policy once for the module (xdist ran its three tests on
# three workers, each building it: about 17 s of CPU each; issue 37, CI's time)
pytestmark = pytest.mark.xdist_group("fifty-presets")

COUNT = 50
# issue 41's must-hold: fifty presets' policy under 1 MiB, each preset adding at most 10 kB
SITE_BYTES = 1_048_576
PRESET_BYTES = 10_000


SITE_SHA = "runai-spec/site-sha256"
Site = tuple[str, list[dict[str, Any]]]


@lru_cache(maxsize=1)
def _fifty(folder: str) -> Site:
    """(the digest of the fifty presets' site file, their policy documents)."""
    presets = many_presets(Path(folder), COUNT)
    registry = PresetRegistry(presets, today=dt.date(2027, 1, 1))
    digest = hashlib.sha256((presets / "site.yaml").read_bytes()).hexdigest()
    return digest, admission.policy_documents(registry)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    return copy.deepcopy(_fifty(str(tmp_path_factory.mktemp("site"))))


def _under(digest: str, job: dict[str, Any]) -> dict[str, Any]:
    """JOB as rendered under the fifty presets' site file (which gained their placements):
    its site digest, wherever it carries one."""
    for meta in [
        job["metadata"],
        *(r["template"]["metadata"] for r in job["spec"]["pytorchReplicaSpecs"].values()),
    ]:
        if SITE_SHA in meta.get("annotations", {}):
            meta["annotations"][SITE_SHA] = digest
    return job


def test_fifty_presets_share_their_layouts_checks(site: Site) -> None:
    fifty = site[1]
    data = fifty[-1]["data"]
    assert len({k.split(".")[0] for k in data if k.endswith(".sha256")}) == COUNT
    variables = {v["name"]: v["expression"] for v in fifty[0]["spec"]["variables"]}
    families = json.loads(variables["families"])
    assert len(families) == COUNT
    # four layouts; torchrun and accelerate on the two that allow both (one GPU runs python,
    # elastic presets torchrun only), accelerate's once per strategy (ddp, fsdp, deepspeed):
    # ten families of checks for fifty presets
    assert len({f for ids in families.values() for f in ids}) == 4 + 2 * 3
    size, shipped = len(json.dumps(fifty[0])), len(json.dumps(documents()[0]))
    assert size < SITE_BYTES, size
    assert (size - shipped) / (COUNT - 4) <= PRESET_BYTES, (size, shipped)  # bytes a preset adds


def test_every_render_is_admitted_and_every_tamper_denied_with_fifty_presets(site: Site) -> None:
    digest, fifty = site
    policy = Policy(fifty, PROJECTS)
    for name, job in renders():
        assert policy.denials(_under(digest, job)) == {}, name
    for kind, (example, change, starts) in sorted(TAMPERS.items()):
        denied = policy.denials(change(_under(digest, example_job(example))))
        assert list(denied) == ["shape"], (kind, denied)
        assert denied["shape"].startswith(starts), (kind, denied["shape"])
    assert len(EXAMPLES) >= 4


def test_a_preset_s_own_values_come_from_the_parameters(site: Site) -> None:
    """A value that differs between the presets of a family (here the CPU of h200-8gpu's
    shapes) is its parameter: the job of another preset of the family is denied, naming it."""
    digest, fifty = site
    data = fifty[-1]["data"]
    assert any(k.startswith("h200-8gpu.pin-") for k in data)
    policy = Policy(fifty, PROJECTS)
    job = _under(digest, example_job("single-node"))
    assert policy.denials(copy.deepcopy(job)) == {}
    shape = "s01-h200-8gpu"  # an H100 shape of h200-8gpu: another CPU, memory, pool, priority
    job["metadata"]["annotations"]["runai-spec/preset"] = shape
    denied = policy.denials(job)
    assert "shape" in denied and f"(preset {shape};" in denied["shape"], denied
