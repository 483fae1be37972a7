"""Plan + manifests -> findings: the site rules, one module per topic, and the CRD check."""
