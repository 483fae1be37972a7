"""An MPIJob (issue 39 item 4) is a resource the Kubernetes back-end applies: its REST path is
mpi-operator's (kubeflow.org/v2beta1, plural mpijobs: the CRD's names)."""

from __future__ import annotations

import yaml

from conftest import ROOT
from runai_spec.cluster.objects import ref_of
from runai_spec.cluster.refs import MPIJOB, RESOURCES

CRD = ROOT.parent / "shared" / "schemas" / "kubeflow.org_mpijobs.yaml"


def test_the_mpijob_resource_is_the_crds() -> None:
    crd = yaml.safe_load(CRD.read_text(encoding="utf-8").split("\n---\n", 1)[1])
    version = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
    assert MPIJOB.group_version == f"{crd['spec']['group']}/{version}"
    assert (MPIJOB.kind, MPIJOB.plural) == (crd["spec"]["names"]["kind"], crd["spec"]["names"]["plural"])
    assert RESOURCES[(MPIJOB.group_version, MPIJOB.kind)] is MPIJOB


def test_a_rendered_mpijob_is_applied_at_its_own_path() -> None:
    job = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "j", "namespace": "ns"},
    }
    ref = ref_of(job)
    assert ref.resource.item(ref.namespace, ref.name) == "/apis/kubeflow.org/v2beta1/namespaces/ns/mpijobs/j"
    assert str(ref) == "mpijobs/ns/j"
