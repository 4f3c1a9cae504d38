"""Kernel families: ``<family>/family.py`` (the contract) and ``<family>/ideas/NNN-slug/``."""
