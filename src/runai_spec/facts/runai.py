"""The Run:ai scheduler's label keys, as Run:ai 2.2x and KAI-Scheduler (docs/priority) read them."""

# A model of someone else's behaviour, like kubeflow.py. These are the defaults of site.yaml's
# queue_label, priority_label, preemptibility_label and node_pool_label (and of label_keys);
# a standalone KAI-Scheduler site names its own `kai.scheduler/...` keys there.
# - The queue: Run:ai labels each project's namespace and workloads `runai/queue: <project>`
#   (KAI-Scheduler standalone: `kai.scheduler/queue`).
# - The priority: the `priorityClassName` label on the workload (KAI-Scheduler
#   docs/priority/README.md, "the priorityClassName label on the workload object").
# - Preemptibility, apart from priority: the `kai.scheduler/preemptibility` label
#   (`preemptible` / `non-preemptible`; KAI-Scheduler's priority and preemptibility
#   separation).
# - The node pool: Run:ai's `runai/node-pool` label.

from __future__ import annotations

QUEUE_LABEL = "runai/queue"
PRIORITY_LABEL = "priorityClassName"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
NODE_POOL_LABEL = "runai/node-pool"
