"""A run owns its output folder: an exclusive lock, fresh logs, no leftovers of a killed run.

``claim_output_folder(path)`` (rank 0, before anything is written):

* takes an exclusive ``flock`` on ``<path>/.run.lock`` (released by the kernel when the process ends, even by
  ``kill -9``, so a stale lock never blocks the next run); a second run on the same folder gets a
  :class:`RunFolderError` naming the folder and the process that holds it; a filesystem that cannot lock at all
  (Lustre mounted ``noflock``: ENOSYS) is named as such;
* moves an existing ``mlperf_log.txt``, ``log.txt`` and the other ranks' ``log.rank<R>.txt`` aside
  (``mlperf_log.<time>.txt``): a run's logs only ever hold that run (a failed attempt's ``init_start`` must not
  precede the good run's). Under the lock, so a second run refused here touches none of them; a rank whose first
  line comes before rank 0 claims the folder writes on in its moved file, and a folder of each node's own keeps
  the other nodes' rank logs where they are;
* a fresh run (not ``--resume``) moves an earlier run's checkpoints aside the same way (``model_final.pth``,
  ``model_<iteration>.pth``, ``last_checkpoint``; the file it reads as ``MODEL.WEIGHT`` stays in place with a
  second link under the new name), which it would otherwise overwrite; a resumed run continues in them;
* deletes the ``.tmp-*`` files a killed run left behind (half-written checkpoints, never complete ones).
"""
import errno
import fcntl
import os
import re
import shutil
import socket
import time

from .errors import UserError
from .fileio import WriteError, atomic_write, remove_stale_temp_files

LOCK_NAME = ".run.lock"
ROTATED = ("mlperf_log.txt", "log.txt")
RANK_LOG = re.compile(r"^log\.rank\d+\.txt$")  # the other ranks' logs (utils/logger.py), moved aside with rank 0's
CHECKPOINT = re.compile(r"^(model_(final|\d{7})\.pth|last_checkpoint)$")  # what CheckpointHook writes


class RunFolderError(UserError, RuntimeError):
    """The output folder cannot be used by this run; the message names it."""


def claim_output_folder(path, fresh=True, reads=()):
    """Returns the lock's open file (keep it for the lifetime of the run), the names of the files moved aside and
    of the temporary files removed. ``fresh``: a new run (the earlier run's checkpoints are moved aside too, except
    the files named in ``reads``)."""
    try:
        os.makedirs(path, exist_ok=True)
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise RunFolderError(f"cannot use output folder '{path}': {e.strerror}") from None
    lock = os.fdopen(fd, "r+")
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            lock.close()  # ENOSYS / EOPNOTSUPP / ENOLCK: the filesystem cannot lock, nobody holds it
            raise RunFolderError(
                f"output folder '{path}' is on a filesystem without file locks (flock: {e.strerror}; Lustre "
                "mounted with noflock, some NFS setups): put OUTPUT_DIR on a filesystem that locks (a local "
                "disk, Lustre mounted with -o flock; not localflock, whose locks other nodes do not see) or ask "
                "the admins to enable flock") from None
        holder = lock.read().strip() or "another process"
        lock.close()
        raise RunFolderError(f"output folder '{path}' is in use by another run ({holder}); wait for it or set "
                             "another OUTPUT_DIR") from None
    try:
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        lock.flush()
        names, linked = list(ROTATED) + sorted(n for n in os.listdir(path) if RANK_LOG.match(n)), []
        if fresh:
            keep = {os.path.realpath(r) for r in reads if r}
            for n in sorted(os.listdir(path)):
                if CHECKPOINT.match(n):
                    (linked if os.path.realpath(os.path.join(path, n)) in keep else names).append(n)
        rotated = _move_aside(path, names) + _move_aside(path, linked, keep_in_place=True)
        return lock, rotated, remove_stale_temp_files(path)
    except OSError as e:  # a full disk, a read-only or quota-bound folder: named, the lock let go
        lock.close()
        if isinstance(e, WriteError):  # the copy aside of a file the run reads
            where, why = e.path, e.reason
        else:
            where, why = e.filename or os.path.join(path, LOCK_NAME), e.strerror
        raise RunFolderError(f"cannot use output folder '{path}': writing '{where}' failed: {why}") from None


def _move_aside(path, names, keep_in_place=False):
    """Each file of ``names`` to ``<stem>.<time><ext>``. ``keep_in_place``: a file the run reads stays where it is
    and gets the new name as a second link (a copy where the filesystem has none), so the run's own save over it
    later leaves the earlier bytes under that name."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rotated = []
    for name in names:
        old = os.path.join(path, name)
        if os.path.exists(old):
            stem, ext = os.path.splitext(name)
            new = os.path.join(path, f"{stem}.{stamp}{ext}")
            n = 1
            while os.path.exists(new):
                new = os.path.join(path, f"{stem}.{stamp}-{n}{ext}")
                n += 1
            if not keep_in_place:
                os.replace(old, new)
            else:
                try:
                    os.link(old, new)
                except OSError:  # the copy complete under its name or not at all (a full disk, Ctrl-C)
                    with open(old, "rb") as src, atomic_write(new, "wb", what="copy of an earlier run's file") \
                            as dst:
                        shutil.copyfileobj(src, dst)
                    shutil.copystat(old, new)
            rotated.append(os.path.basename(new))
    return rotated


def last_checkpoint_in(folder):
    """The checkpoint a run folder's ``last_checkpoint`` names ("" when it has none): the file of that name in this
    folder, where it was saved beside its tag. The tag's own path is read only when the folder has no such file:
    written relative to where an earlier run started, or absolute in a folder since copied elsewhere, it can name
    another run's file of the same name."""
    try:
        with open(os.path.join(folder, "last_checkpoint")) as f:
            tag = f.read().strip()
    except OSError:
        return ""
    here = os.path.join(folder, os.path.basename(tag))
    return here if tag and os.path.isfile(here) else tag
