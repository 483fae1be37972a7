"""Profile paths -> workloads: load, plan, render and check one profile; many, streaming."""
