"""Kernel sources and builds: tree URLs, the git mirror, patch series, the build queue, artifacts.

`tree_urls` decides which tree a submitter may name, `gitops` keeps the
mirrors, `patch_series` reads an mbox and `apply_series` applies it with git
am; `queue` holds the build queue (lease, retry, outcome) for the Celery
workers and for the pull-based build machines (`machines`); `artifacts`
stores what a build produced and `archive` packs a kernel's results.
"""
