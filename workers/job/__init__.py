"""One job on this node: resolve its files, check it against the build and the model, run
its counterbalanced blocks on real servers, and write what they measured."""
