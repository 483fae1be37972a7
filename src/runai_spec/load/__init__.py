"""Files -> validated models: the strict YAML loader, profiles, presets, the site, signed approvals."""
