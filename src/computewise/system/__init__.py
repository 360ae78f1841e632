"""What every layer may need from the machine it runs on, with no project logic.

A leaf package: it imports only the standard library (and ``computewise.errors``), so the
packages above it (``monitor``, ``optimize``, ``train``, ``serve``, ``tune``, ``scale``) can share
it without importing each other.
"""
