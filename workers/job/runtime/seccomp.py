"""The sandbox's seccomp filter: the system calls a commit's build or server never needs,
declared once (``REFUSED``), compiled with libseccomp to the BPF program bubblewrap loads
(``--seccomp FD``) before it runs the command (docs/security.md).

Everything else is allowed, ``ioctl`` included without filtering its requests: the GPU
drivers (CUDA's ``/dev/nvidia*``, ROCm's ``/dev/kfd``) are driven by ioctls, and the CUDA
driver also needs ``mmap``/``mprotect`` of executable memory (its JIT), ``clone``/``clone3``
(its threads), ``memfd_create``, ``sched_setaffinity`` and the NUMA calls (``mbind``,
``get_mempolicy``), none of which is refused here. A refused call fails with EPERM
instead of killing the process, so that a tool that probes for a feature (cmake, ccache,
glibc) falls back as it does on a kernel without it.
"""

from __future__ import annotations

import errno
import os
from functools import lru_cache

# Refused inside the sandbox, on every ABI of this machine (x86_64's i386 and x32, arm64's
# 32-bit ARM): debugging and reading other processes (ptrace, process_vm_*, pidfd_getfd,
# perf_event_open), namespaces and mounts (the sandbox makes its own; a nested one is how
# a kernel bug is usually reached), the kernel's keyring, BPF, userfaultfd (a classic tool
# for winning kernel races), io_uring (a large attack surface no build uses), modules,
# kexec, reboot, swap, accounting, quotas, the clock, the kernel log, file handles
# (open_by_handle_at: the old container escape) and obsolete calls. Names missing on an
# architecture are skipped by libseccomp.
REFUSED = (
    "acct", "add_key", "bpf", "chroot", "clock_adjtime", "clock_settime", "delete_module",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "init_module",
    "io_uring_enter", "io_uring_register", "io_uring_setup", "kexec_file_load",
    "kexec_load", "keyctl", "lookup_dcookie", "mount", "mount_setattr", "move_mount",
    "nfsservctl", "open_by_handle_at", "open_tree", "perf_event_open", "pidfd_getfd",
    "pivot_root", "process_vm_readv", "process_vm_writev", "ptrace", "quotactl",
    "quotactl_fd", "reboot", "request_key", "setns", "settimeofday", "stime", "swapoff",
    "swapon", "syslog", "umount", "umount2", "unshare", "uselib", "userfaultfd", "vhangup",
)
# What bubblewrap itself calls of REFUSED while it builds the sandbox (its namespaces,
# mounts and new root), before it loads the filter: a container that runs the worker
# refuses the rest (deploy/worker-seccomp.json, ``container_profile``).
BUBBLEWRAP_NEEDS = ("mount", "pivot_root", "umount2", "unshare")


@lru_cache(maxsize=1)
def refusing_filter() -> bytes:
    """``REFUSED`` as a BPF program (every other call allowed), compiled once per process;
    OSError or RuntimeError where libseccomp cannot be loaded (``unavailable``)."""
    import pyseccomp  # Linux only: the sandbox runs nowhere else

    program = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    native = pyseccomp.system_arch()
    # A process may enter the kernel through another ABI of the machine (int 0x80 on
    # x86_64): the same list holds there.
    compat = {pyseccomp.Arch.X86_64: (pyseccomp.Arch.X86, pyseccomp.Arch.X32),
              pyseccomp.Arch.AARCH64: (pyseccomp.Arch.ARM,)}.get(native, ())
    for arch in compat:
        program.add_arch(arch)
    for name in REFUSED:
        program.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    with os.fdopen(os.memfd_create("specfarm-seccomp"), "w+b") as compiled:
        program.export_bpf(compiled)
        compiled.seek(0)
        return compiled.read()


def container_profile() -> dict[str, object]:
    """The seccomp profile (Docker's JSON) of a container running the worker: REFUSED but
    what bubblewrap needs, on this machine's ABIs; the sandbox's own filter refuses the
    rest inside."""
    return {"defaultAction": "SCMP_ACT_ALLOW",
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32",
                              "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
            "syscalls": [{"names": sorted(set(REFUSED) - set(BUBBLEWRAP_NEEDS)),
                          "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}]}


def unavailable() -> str | None:
    """Why the filter cannot be made here (no libseccomp), or None."""
    try:
        refusing_filter()
    except (ImportError, OSError, RuntimeError) as exc:
        return (f"the seccomp filter cannot be compiled ({exc}); install libseccomp "
                "(Debian/Ubuntu: libseccomp2) and the pyseccomp package")
    return None
