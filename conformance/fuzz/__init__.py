"""Differential fuzzing: random JAX programs converted by jaxconv and compared with jax.jit.

``generate`` draws a program from a seed, ``run`` converts and compares it on several
input sets, ``minimise`` shrinks a mismatch to a small reproducer, ``known`` holds the
named limitations, and ``cli`` is what ``scripts/fuzz.py`` runs.
"""
