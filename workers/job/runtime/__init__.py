"""The llama.cpp runtime on a node: probe a binary, run a server, talk to it."""
