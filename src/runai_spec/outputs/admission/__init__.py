"""The cluster's gate: a ValidatingAdmissionPolicy derived from the approved presets' renders."""
