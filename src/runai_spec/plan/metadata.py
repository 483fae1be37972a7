"""The job's namespace, labels, annotations and runPolicy, with where each came from."""

from __future__ import annotations

from .. import __version__
from ..facts.kai import PLACEMENT_ANNOTATION, TOPOLOGY_ANNOTATION
from ..facts.kubeflow import (
    DIAGNOSTICS_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NAME_LABEL,
    PRESET_ANNOTATION,
    PRESET_SHA_ANNOTATION,
    PROFILE_SHA_ANNOTATION,
    PROJECT_LABEL,
    SITE_SHA_ANNOTATION,
    VERSION_ANNOTATION,
)
from ..load.presets import Preset
from ..load.profile import LoadedProfile, Profile
from ..load.registry import ApprovedPreset
from ..load.site import SITE_FILE, Site
from .origins import Entry, Sources, derived, same


def namespace_for(site: Site, project: str) -> str:
    return site.namespaces.get(project) or site.namespace_pattern.format(project=project)


def plan_labels(profile: Profile, preset: Preset, site: Site, src: Sources) -> dict[str, Entry]:
    """The scheduler's labels (queue, priority, preemptibility, node pool) and runai-spec's."""
    key_fixed = derived("label key fixed by runai-spec")
    labels = {
        site.queue_label: (
            site.queue_label,
            profile.project,
            src.site("queue_label"),
            src.profile("project"),
        ),
        PROJECT_LABEL: (PROJECT_LABEL, profile.project, key_fixed, src.profile("project")),
        site.priority_label: (
            site.priority_label,
            preset.priority,
            src.site("priority_label"),
            src.preset("priority"),
        ),
        site.preemptibility_label: (
            site.preemptibility_label,
            "preemptible" if preset.preemptible else "non-preemptible",
            src.site("preemptibility_label"),
            src.preset("preemptible"),
        ),
        MANAGED_BY_LABEL: (
            MANAGED_BY_LABEL,
            MANAGED_BY,
            key_fixed,
            derived(f"{MANAGED_BY} marks what it created"),
        ),
        NAME_LABEL: (NAME_LABEL, profile.name, key_fixed, src.profile("name")),
    }
    if preset.node_pool:
        labels[site.node_pool_label] = (
            site.node_pool_label,
            preset.node_pool,
            src.site("node_pool_label"),
            src.preset("node_pool"),
        )
    return labels


def plan_annotations(
    loaded: LoadedProfile,
    approved: ApprovedPreset,
    site_sha256: str,
    diagnostics: tuple[str, ...],
    src: Sources,
) -> dict[str, Entry]:
    """runai-spec's annotations: its version, the preset and the hashes it was approved by."""
    note = derived("annotation key fixed by runai-spec")
    annotations = {
        VERSION_ANNOTATION: (VERSION_ANNOTATION, __version__, note, derived("runai-spec version")),
        PRESET_ANNOTATION: (PRESET_ANNOTATION, approved.name, note, src.profile("preset")),
        PRESET_SHA_ANNOTATION: (
            PRESET_SHA_ANNOTATION,
            approved.sha256,
            note,
            src.ledger(f"{approved.name}.yaml"),
        ),
        PROFILE_SHA_ANNOTATION: (
            PROFILE_SHA_ANNOTATION,
            loaded.sha256,
            note,
            derived(f"sha256 of {loaded.path} as parsed (canonical JSON)"),
        ),
    }
    if site_sha256:
        annotations[SITE_SHA_ANNOTATION] = (SITE_SHA_ANNOTATION, site_sha256, note, src.ledger(SITE_FILE))
    if diagnostics:
        annotations[DIAGNOSTICS_ANNOTATION] = (
            DIAGNOSTICS_ANNOTATION,
            ",".join(diagnostics),
            note,
            src.profile("diagnostics"),
        )
    return annotations


def plan_topology_annotations(site: Site, approved: ApprovedPreset, src: Sources) -> dict[str, Entry]:
    """KAI's topology-aware placement of a multi-node preset's job, from the site's topology
    (facts/kai.py: KAI reads it from the PyTorchJob's own annotations)."""
    topology = site.topology
    placement = None if topology is None else topology.placement.get(approved.name)
    if topology is None or placement is None or approved.preset.layout != "multi-node":
        return {}
    out = {
        TOPOLOGY_ANNOTATION: (
            TOPOLOGY_ANNOTATION,
            topology.name,
            derived("KAI-Scheduler's annotation key"),
            src.site("topology.name"),
        )
    }
    for how, level in placement.levels():
        key = PLACEMENT_ANNOTATION[how]
        origin = src.site(f"topology.placement.{approved.name}.{how}")
        out[key] = (key, level, derived("KAI-Scheduler's annotation key"), origin)
    return out


def plan_pod_annotations(preset: Preset, src: Sources) -> dict[str, Entry]:
    """The network's pod annotations (the preset's)."""
    return {
        key: same(src.preset(f"network.annotations.{key}"), key, value)
        for key, value in preset.network.annotations.items()
    }


def plan_run_policy(preset: Preset, src: Sources) -> dict[str, Entry]:
    """The PyTorchJob's runPolicy, from the preset's run_policy."""
    policy = preset.run_policy
    kubeflow_field = derived("Kubeflow runPolicy field")

    def run(key: str, value: str | int, field: str) -> Entry:
        return (key, value, kubeflow_field, src.preset(f"run_policy.{field}"))

    run_policy = {
        "cleanPodPolicy": run("cleanPodPolicy", policy.clean_pod_policy, "clean_pod_policy"),
        "backoffLimit": run("backoffLimit", policy.backoff_limit, "backoff_limit"),
    }
    if policy.ttl_seconds_after_finished is not None:
        run_policy["ttlSecondsAfterFinished"] = run(
            "ttlSecondsAfterFinished", policy.ttl_seconds_after_finished, "ttl_seconds_after_finished"
        )
    if policy.active_deadline_seconds is not None:
        run_policy["activeDeadlineSeconds"] = run(
            "activeDeadlineSeconds", policy.active_deadline_seconds, "active_deadline_seconds"
        )
    return run_policy
