"""Models -> Plan (pure): the preset's shape once, names, launcher argv, env, volumes, failure semantics."""
