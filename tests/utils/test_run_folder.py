"""The output folder lock (utils/run_folder.py)."""
import errno
import fcntl
import re

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


def test_a_fresh_run_moves_an_earlier_runs_checkpoints_aside(tmp_path):
    """A new run in a folder holding an earlier run's checkpoints overwrote model_final.pth, model_<iter>.pth and
    last_checkpoint: they are moved aside as the logs are, bytes intact. A run that resumes continues that run: its
    checkpoints stay, and so does a file the run reads (MODEL.WEIGHT in the folder)."""
    import os

    names = {"model_final.pth": b"final", "model_0000100.pth": b"it100", "last_checkpoint": b"model_final.pth",
             "notes.pth": b"mine"}
    for name, data in names.items():
        (tmp_path / name).write_bytes(data)
    lock, rotated, _ = claim_output_folder(str(tmp_path))
    lock.close()
    assert sorted(os.listdir(tmp_path)) == sorted([".run.lock", "notes.pth", *rotated])
    assert len(rotated) == 3
    for name, data in names.items():
        if name != "notes.pth":
            stem, ext = os.path.splitext(name)
            [moved] = [r for r in rotated if r.startswith(stem + ".")]
            assert moved.endswith(ext) and (tmp_path / moved).read_bytes() == data
    # moved once: the next fresh run leaves the moved files as they are
    lock, again, _ = claim_output_folder(str(tmp_path))
    lock.close()
    assert again == []
    # resuming: the run's own checkpoints stay where --resume and last_checkpoint find them
    (tmp_path / "model_final.pth").write_bytes(b"final2")
    (tmp_path / "last_checkpoint").write_bytes(b"model_final.pth")
    lock, kept, _ = claim_output_folder(str(tmp_path), fresh=False)
    lock.close()
    assert kept == [] and (tmp_path / "model_final.pth").read_bytes() == b"final2"
    # a fresh run reading a checkpoint of the folder as its weights keeps it in place, and its bytes survive the
    # run's own final save over it (atomic: a new file renamed over the name) under the moved-aside name
    lock, moved, _ = claim_output_folder(str(tmp_path), reads=[str(tmp_path / "model_final.pth")])
    lock.close()
    assert (tmp_path / "model_final.pth").read_bytes() == b"final2"
    assert sorted(m.split(".")[0] for m in moved) == ["last_checkpoint", "model_final"]
    (tmp_path / "new.tmp").write_bytes(b"the run's own")
    os.replace(tmp_path / "new.tmp", tmp_path / "model_final.pth")
    [aside] = [m for m in moved if m.startswith("model_final.")]
    assert (tmp_path / aside).read_bytes() == b"final2"



@pytest.mark.slow  # a process of its own (a file size limit)
def test_a_copy_aside_cut_short_leaves_no_half_file(tmp_path):
    """Where the filesystem has no hard links, the checkpoint a fresh run reads is copied aside; a copy cut short
    (a full disk, here a file size limit) left a half checkpoint under the moved-aside name, and the next fresh
    run's rotation kept it as an earlier run's file. The copy is whole under its name or not there."""
    import subprocess
    import sys

    (tmp_path / "model_final.pth").write_bytes(b"x" * 100_000)
    code = f"""
import os, resource, signal
from maskrcnn_benchmark.utils import run_folder
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))
def no_links(*a):
    raise OSError(1, "Operation not permitted")
os.link = no_links
try:
    run_folder.claim_output_folder({str(tmp_path)!r}, reads=[{str(tmp_path / 'model_final.pth')!r}])
except Exception as e:
    print("failed:", type(e).__name__, e)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "failed:" in r.stdout and "File too large" in r.stdout, r.stdout + r.stderr
    # the line names the copy that could not be written (not the folder's lock file, written before it)
    assert re.search(r"writing '\S*/model_final\.\d{8}-\d{6}\.pth' failed", r.stdout), r.stdout
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("model_final"))
    assert left == ["model_final.pth"], left
    assert (tmp_path / "model_final.pth").stat().st_size == 100_000


def test_a_new_run_moves_the_other_ranks_logs_aside_with_rank_0s(tmp_path):
    """log.txt and mlperf_log.txt were moved aside for a new run, the other ranks' log.rank<R>.txt were not: the
    next run's rank 3 appended to the earlier run's file, and the error line that named it ("traceback in
    log.rank3.txt") led to the earlier run's traceback first. Rank 0 moves them all aside under the folder's lock
    (those of ranks the new run does not have too)."""
    import os

    for name in ("log.txt", "log.rank3.txt", "log.rank12.txt", "log.rankx.txt"):
        (tmp_path / name).write_text("an earlier run\n")
    lock, rotated, _ = claim_output_folder(str(tmp_path), fresh=False)
    lock.close()
    assert sorted(r.rsplit(".", 2)[0] for r in rotated) == ["log", "log.rank12", "log.rank3"], rotated
    left = sorted(n for n in os.listdir(tmp_path) if n.startswith("log."))
    assert "log.rank3.txt" not in left and "log.rank12.txt" not in left and "log.txt" not in left
    assert "log.rankx.txt" in left  # not a rank's log
