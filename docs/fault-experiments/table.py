import json
rows=[json.loads(l) for l in open(__import__("sys").argv[1] if len(__import__("sys").argv)>1 else "results.jsonl")]
print("| run | outcome | fault | kubelet restarts (per pod) | recreations/resubmits | recover s | saved step | resumed steps | resume ok | final ranks, same weights |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['name']} | {r['outcome']} | {r.get('fault','-')} | {r['kubelet_restarts']} {r['restarts_per_pod']} | {r['recreations']}/{r['resubmits']} | {r.get('recover_s')} | {r.get('saved_step_at_fault')} | {r.get('resume_steps')} | {r.get('resume_ok')} | {r['done_ranks']}, {r['final_hash_equal']} |")
