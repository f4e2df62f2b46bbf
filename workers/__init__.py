"""What runs on a node, in wings by what they do: ``job`` (one job: resolve, check, run,
write), ``setup`` (builds and models), ``fleet`` (the Celery task, the worker, its config);
``paths`` is where a node keeps its files."""
