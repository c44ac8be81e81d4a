"""Packaged scenario files (YAML). ``default.yaml`` is what ``servesim run`` runs with no argument."""
