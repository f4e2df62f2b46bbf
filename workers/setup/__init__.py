"""Setting a node up: llama.cpp builds (``farm build``), and ``farm provision``'s CPU build
and models, the constructed MTP oracles among them."""
