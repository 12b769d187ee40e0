"""A pod's port made as silent as a node that lost power, without root.

A frozen process (SIGSTOP) still has its listening socket in the kernel, which completes
every new connection's handshake into the socket's accept queue: a client connects at
once and then waits for an answer. A node that is off answers nothing: the SYN goes
unanswered and the client's connect times out (nginx's proxy_connect_timeout). Linux
drops a SYN once a listener's accept queue is full (its backlog plus one), so filling the
frozen listener's queue with connections of our own gives every later client what the
lost node gives it: no SYN-ACK. The connections already open stay silent as they are.
"""

from __future__ import annotations

import errno
import resource
import select
import socket

from harness.errors import RollcheckError

# a connect on loopback completes inside the call: one left pending this long is a SYN
# the kernel dropped (the queue is full)
UNANSWERED_S = 0.5
MOST = 65536  # no listener's backlog is larger (net.core.somaxconn caps it)


class SilenceError(RollcheckError, RuntimeError):
    """A pod's port could not be made silent (the local target says it as a TargetError)."""


def fill_accept_queue(ip: str, port: int) -> list[socket.socket]:
    """Connections that fill the accept queue of a listener that no longer accepts (its
    process frozen); hold them until the node comes back, then close them. Empty when
    nothing listens there (a connect is refused: the port was not open yet)."""
    _raise_open_files_limit()
    held: list[socket.socket] = []
    try:
        while len(held) < MOST:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            err = s.connect_ex((ip, port))
            if err not in (0, errno.EINPROGRESS):
                s.close()
                break
            poll = select.poll()  # select() cannot watch descriptors past 1023
            poll.register(s, select.POLLOUT)
            if not poll.poll(UNANSWERED_S * 1000):  # no SYN-ACK: the queue is full
                s.close()
                return held
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:  # refused
                s.close()
                break
            held.append(s)
    except OSError as exc:  # out of file descriptors, most likely
        release(held)
        raise SilenceError(f"cannot fill the accept queue of {ip}:{port}: {exc}") from None
    if held:
        release(held)
        raise SilenceError(
            f"{ip}:{port} kept accepting connections ({len(held)}): is its process frozen?"
        )
    return held


def release(held: list[socket.socket]) -> None:
    for s in held:
        s.close()
    held.clear()


def _raise_open_files_limit() -> None:
    """A listener's backlog is up to 4096 connections (uvicorn's and vLLM's: 2048): the
    soft limit on open files goes up to the hard one, as far as needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
