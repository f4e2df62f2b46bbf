"""Results beyond one store (docs/board.md): a machine's campaigns as one self-describing
bundle file (``bundle``, ``share``, ``machine``, ``keys``), checked before anything of it
is believed (``verify``), taken onto a board whose own statistics recompute every figure
(``add``, ``trust``), and read back for its tables and site (``view``); ``steps`` opens a
board's store for each ``farm board`` command and takes its step there."""
