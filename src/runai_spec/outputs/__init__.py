"""Every result for people and CI: reports, review, explain, diff, init, the admission policy."""
