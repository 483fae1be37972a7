"""The shipped templates compiled by Jinja (runai_spec.render.write_compiled_templates)."""
