"""Recipes that fit a host: pip lines, Dockerfiles, docker run lines, compose files, cluster jobs.

Each function takes a `HostSummary` (from `RigFacts`) and options, and returns a `Recipe`: the text,
with a comment on each line saying why, plus the reasons and the facts it used. Pure: no I/O.
Version facts come from `gpurig.knowledge.loaders`; this package keeps no version table of its own.
"""
