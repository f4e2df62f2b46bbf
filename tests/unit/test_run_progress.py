"""``farm run``'s progress in a pipe or a log: a failed job's line as plain text, its error
as written (no literal style tags, no "[...]" read as markup), no bar drawn."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from farm.cli.progress import RunProgress
from farm.errors import ServerStartError
from farm.matrix.load import load_matrix
from tests.helpers import matrix_dict, write_matrix


def test_a_failed_job_is_one_plain_line_with_its_error_as_written(tmp_path: Path) -> None:
    _, [spec] = load_matrix(write_matrix(tmp_path, matrix_dict(tmp_path / "m.gguf")))
    out = io.StringIO()
    progress = RunProgress(Console(file=out, force_terminal=False, width=200))
    progress.start(1, 0, 4)
    progress.failed(spec, ServerStartError("[request_failed] llama-server exited 1"))
    progress.close()
    assert out.getvalue() == (f"job {spec.job_key[:10]} failed: [request_failed] "
                              "llama-server exited 1\n")
