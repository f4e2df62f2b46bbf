"""What runs on a node: llama.cpp builds, checks, the executor and its sinks, the Celery task."""
