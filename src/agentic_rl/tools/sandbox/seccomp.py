"""The seccomp filter of the bwrap sandbox: no new user namespaces inside it.

A process that can create a user namespace gets every capability inside it and, with that, far
more kernel surface (mounting file systems, netfilter, ...), the usual first step of a kernel
exploit. bubblewrap's own ``--disable-userns`` needs ``--unshare-user``, which the sandbox does
not use when the host runs as root (the worker drops to a real unprivileged host uid instead), so
the sandbox loads this filter with ``bwrap --seccomp FD`` for every process in it:

* ``unshare(2)`` and ``clone(2)`` with ``CLONE_NEWUSER`` in their flags fail with ``EPERM``;
* ``clone3(2)`` fails with ``ENOSYS`` (its flags sit in memory, which a filter cannot read);
  the C library then falls back to ``clone``, as it does under Docker's default profile;
* system calls of another ABI (i386 or x32 on x86-64) fail with ``ENOSYS``, so that the rule
  cannot be bypassed through another system call table;
* everything else is allowed.

The program is classic BPF (``struct sock_filter``, see ``linux/filter.h`` and
``linux/seccomp.h``), built for x86-64 and AArch64; :func:`user_namespace_filter` returns None on
other architectures, where the sandbox runs without it.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

__all__ = ["user_namespace_filter", "filter_fd"]

# classic BPF opcodes (linux/bpf_common.h) and seccomp return values (linux/seccomp.h)
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_CLONE_NEWUSER = 0x10000000
_X32_SYSCALL_BIT = 0x40000000
# (AUDIT_ARCH_*, clone, unshare, clone3, has the x32 ABI)
_ARCHES = {
    "x86_64": (0xC000003E, 56, 272, 435, True),
    "aarch64": (0xC00000B7, 220, 97, 435, False),
}
# offsets in struct seccomp_data: nr, arch, args[0] (its low 32 bits: both arches are little-endian)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def user_namespace_filter(machine: str | None = None) -> bytes | None:
    """The compiled filter for ``machine`` (default: this host's ``platform.machine()``).

    Returns the bytes of a ``struct sock_filter`` array (8 bytes per instruction, host byte
    order), the format ``bwrap --seccomp FD`` reads; None for an unsupported architecture.
    Never raises.
    """
    arch = _ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit_arch, clone, unshare, clone3, has_x32 = arch
    eperm, enosys = _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS
    # jump offsets count the instructions skipped after the current one
    body = [
        _insn(_LD_W_ABS, 0, 0, _ARCH),
        _insn(_JEQ_K, 1, 0, audit_arch),  # another ABI: refused
        _insn(_RET_K, 0, 0, enosys),
        _insn(_LD_W_ABS, 0, 0, _NR),
    ]
    if has_x32:
        body += [_insn(_JGE_K, 0, 1, _X32_SYSCALL_BIT), _insn(_RET_K, 0, 0, enosys)]
    body += [
        _insn(_JEQ_K, 3, 0, clone),  # -> load flags
        _insn(_JEQ_K, 2, 0, unshare),  # -> load flags
        _insn(_JEQ_K, 0, 4, clone3),  # clone3 -> ENOSYS, else allow
        _insn(_RET_K, 0, 0, enosys),
        _insn(_LD_W_ABS, 0, 0, _ARG0_LOW),
        _insn(_JSET_K, 0, 1, _CLONE_NEWUSER),
        _insn(_RET_K, 0, 0, eperm),
        _insn(_RET_K, 0, 0, _RET_ALLOW),
    ]
    return b"".join(body)


def filter_fd() -> int | None:
    """A pipe's read end holding :func:`user_namespace_filter` for ``bwrap --seccomp FD``.

    The caller passes it to bwrap (``pass_fds``) and closes it after the start. None on an
    unsupported architecture. Raises OSError when no pipe can be made.
    """
    program = user_namespace_filter()
    if program is None:
        return None
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # 120 bytes at most: far below the pipe's buffer
    finally:
        os.close(write_end)
    return read_end
