"""The output folder lock (utils/run_folder.py)."""
import errno
import fcntl

import pytest

from maskrcnn_benchmark.utils.run_folder import RunFolderError, claim_output_folder


def test_a_filesystem_without_flock_is_named_as_such(tmp_path, monkeypatch):
    """Lustre mounted noflock answers flock with ENOSYS: that is not 'another run holds the folder'."""
    def no_flock(fd, op):
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with pytest.raises(RunFolderError) as e:
        claim_output_folder(str(tmp_path / "out"))
    msg = str(e.value)
    assert "filesystem without file locks" in msg and "Function not implemented" in msg and "noflock" in msg
    assert "in use by another run" not in msg
    # Lustre's localflock keeps locks on one node: two trials on two nodes would both take the folder
    assert "not localflock" in msg


def test_a_full_disk_when_the_folder_is_claimed_names_the_file(tmp_path, monkeypatch):
    """Writing the lock's holder line on a full disk was an error line naming no file (and left the lock open)."""
    import os

    real_fdopen = os.fdopen
    opened = []

    class FullDisk:
        def __init__(self, f):
            self.f = f
            opened.append(self)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def flush(self):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: FullDisk(real_fdopen(fd, mode)))
    with pytest.raises(RunFolderError) as e:
        claim_output_folder(str(tmp_path / "out"))
    assert str(e.value) == (f"cannot use output folder '{tmp_path / 'out'}': writing "
                            f"'{tmp_path / 'out' / '.run.lock'}' failed: No space left on device")
    assert opened[0].f.closed


def test_a_held_lock_names_the_holder(tmp_path):
    lock, _, _ = claim_output_folder(str(tmp_path))
    try:
        with pytest.raises(RunFolderError, match="is in use by another run"):
            claim_output_folder(str(tmp_path))
    finally:
        lock.close()
    claim_output_folder(str(tmp_path))[0].close()  # released: the next run takes it
