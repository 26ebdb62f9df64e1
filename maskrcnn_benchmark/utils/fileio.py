"""Writing files so that a reader never sees half of one: the one helper every writer of this project uses.

``atomic_write(path)`` yields a file object for a temporary file in the destination folder (named ``.tmp-*`` so
that ``remove_stale_temp_files`` can clear what a killed process left behind); when the block ends normally the
file is flushed, synced and renamed over ``path``, so readers see either the old file or the complete new one.
When the block raises, the temporary file is removed and ``path`` is untouched. Files get the mode a plain
``open()`` would give them (0644 under the usual umask 022), not the 0600 of ``tempfile.mkstemp``.

A failure to write names what was being written (``what``: "checkpoint", "MLPerf log", "results json", ...) and
the path, as a :class:`WriteError`, for example ``cannot write the checkpoint 'out/model_0001000.pth': [Errno 28]
No space left on device``. Standard library only: the torch-free log reviewer uses it too.
"""
import contextlib
import errno
import os
import tempfile

from .errors import UserError

TEMP_PREFIX = ".tmp-"


class WriteError(UserError, OSError):
    """A file could not be written; the message names what it was and where."""

    def __init__(self, what, path, cause):
        reason = cause.strerror or str(cause) if isinstance(cause, OSError) else str(cause)
        code = f"[Errno {cause.errno}] " if isinstance(cause, OSError) and cause.errno else ""
        super().__init__(getattr(cause, "errno", None) or errno.EIO,
                         f"cannot write the {what} '{path}': {code}{reason}")
        self.what, self.path, self.reason = what, str(path), reason

    def __str__(self):
        return self.strerror


def _file_mode():
    """The mode a plain ``open()`` would give a new file (0o666 less the umask). The umask is read from
    /proc/self/status where the kernel shows it: setting it to read it back (the fallback) changes it for the whole
    process for a moment, and a file another thread creates then (inductor's compile workers) gets 0o666."""
    try:
        with open("/proc/self/status") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0)
        os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_write(path, mode="w", what="file", fsync=True, encoding=None):
    """``with atomic_write("out/bbox.json", what="results json") as f: f.write(text)``.

    ``mode`` is ``"w"`` (text) or ``"wb"`` (binary). Errors while opening, writing or renaming are raised as
    :class:`WriteError` naming ``what`` and ``path``; an error raised by the caller's block passes through
    unchanged. Either way the temporary file is gone afterwards.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX + os.path.basename(path) + ".", dir=folder)
    except OSError as e:
        raise WriteError(what, path, e) from None
    try:
        with os.fdopen(fd, mode, encoding=encoding if "b" not in mode else None) as f:
            yield f  # an OSError in the caller's block is a write into f: reported as this file's failure
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
        if fsync:
            _fsync_folder(folder)
    except WriteError:
        _remove(tmp)
        raise
    except OSError as e:
        _remove(tmp)
        raise WriteError(what, path, e) from None
    except BaseException:
        _remove(tmp)
        raise


def _fsync_folder(folder):
    """The rename on disk too (a crash after it could otherwise leave the old name). Where a folder cannot be
    opened or synced (some network file systems), the file's own sync above is what there is."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def write_text(path, text, what="file", fsync=True):
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "w", what=what, fsync=fsync) as f:
        f.write(text)


def write_bytes(path, data, what="file", fsync=True):
    with atomic_write(path, "wb", what=what, fsync=fsync) as f:
        f.write(data)


class LineAppender:
    """Appends whole lines to a log file: a line that cannot be written completely (a full disk) is cut off
    again, so the file never ends in half a line (an MLPerf log with a broken JSON line fails review), and a
    :class:`WriteError` names ``what`` and the path."""

    def __init__(self, path, what):
        self.path, self.what = os.fspath(path), what
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        except OSError as e:
            raise WriteError(what, self.path, e) from None

    def write(self, text):
        data = text.encode("utf-8")
        start = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            done = 0
            while done < len(data):
                done += os.write(self.fd, data[done:])
        except OSError as e:
            try:
                os.ftruncate(self.fd, start)
            except OSError:
                pass
            raise WriteError(self.what, self.path, e) from None

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def remove_stale_temp_files(folder):
    """Delete the temporary files (``.tmp-*``) that a killed writer left in ``folder``; never complete files.
    Returns their names."""
    if not folder or not os.path.isdir(folder):
        return []
    removed = []
    for name in sorted(os.listdir(folder)):
        if name.startswith(TEMP_PREFIX):
            try:
                os.unlink(os.path.join(folder, name))
                removed.append(name)
            except OSError:
                pass
    return removed
