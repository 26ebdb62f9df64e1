"""Atomic writes (utils/fileio.py): what a crash or a full disk leaves behind."""
import os
import stat

import pytest

from maskrcnn_benchmark.utils import fileio


def test_the_rename_is_made_durable_with_the_folder(tmp_path, monkeypatch):
    """The file's bytes were synced before the rename, the rename itself never: after a node's crash or power
    loss the folder could still hold the previous checkpoint and last_checkpoint (or neither file), whatever the
    run had reported. The folder is synced after the rename, so the new name is on disk when write_text
    returns."""
    synced, replaced = [], []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append((os.fstat(fd).st_mode, bool(replaced))),
                                                 real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (replaced.append(b), real_replace(a, b)))
    fileio.write_text(str(tmp_path / "last_checkpoint"), "model_final.pth")
    assert (tmp_path / "last_checkpoint").read_text() == "model_final.pth"
    assert [(stat.S_ISREG(m), after) for m, after in synced if stat.S_ISREG(m)] == [(True, False)]  # the bytes
    assert [after for m, after in synced if stat.S_ISDIR(m)] == [True]  # the folder, after the rename
    synced.clear()
    fileio.write_text(str(tmp_path / "log.json"), "{}", fsync=False)  # asked for no sync: none
    assert synced == []


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    path = tmp_path / "bbox.json"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with fileio.atomic_write(str(path), what="results json") as f:
            f.write("half")
            raise RuntimeError("killed")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["bbox.json"]


def test_the_file_mode_is_read_without_changing_the_umask(monkeypatch):
    """Reading the umask by setting it (os.umask(0), then back) left every other thread a moment with umask 0: a file
    it created then got mode 0o666. Where the kernel shows the umask (/proc/self/status), it is read there."""
    import os

    from maskrcnn_benchmark.utils import fileio

    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc/self/status here")
    current = os.umask(0o027)
    try:
        def changed(*args):
            raise AssertionError("the umask was changed to be read")

        monkeypatch.setattr(fileio.os, "umask", changed)
        assert fileio._file_mode() == 0o640
    finally:
        monkeypatch.undo()
        os.umask(current)
