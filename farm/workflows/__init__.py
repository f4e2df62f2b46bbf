"""Workflows the command line calls: each takes parsed arguments, runs its steps through
``farm.runner``, ``farm.fleet``, the store and the node, and returns typed results for
``farm.cli`` to render; what it tells along the way goes to a callback passed in.

- ``bisect``: a bisect's target, plan and answer; ``bisect_steps`` its steps as stored
  campaigns and their evidence; ``bisect_jobs`` the two ways a step's job runs (here or
  on the fleet).
- ``track``: a matrix at a ref's current commit, once per commit, run here or submitted.
- ``database``: a result database's schema migrated, a worker's role granted.
- ``peers``: peers' files read and stored (``farm import``), their figures beside the
  farm's arms (``farm peers``).
- ``reports``: the reports' loaders (``farm report``, ``compare``, ``curve``, ``recommend``,
  ``export``, ``history``): the store opened, the campaign found, frames loaded.
- ``node``: this machine's places and model files (``farm paths``), its builds made,
  registered, listed and pruned (``farm build``, ``builds``), provisioned (``provision``).
- ``fleet``: the fleet's verbs (``farm submit``, ``status``, ``workers``, ``cancel``, and
  ``farm worker``'s checks before it serves); ``fleet_slurm``: ``farm slurm launch``.
"""
