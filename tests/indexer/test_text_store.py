"""Text-store readers open the data file alone, so a lock file's reused inode cannot block them."""

import os
import shutil

from tapt.indexer.store.text_store import TextStore


def test_a_shared_lock_file_inode_does_not_block_a_reader(fake_index, tmp_path):
    # The situation after `index add` deleted an old generation whose reader is still cached:
    # its lock.mdb inode comes back as another store's lock file. A hard link makes it certain.
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(fake_index / "shards" / "000000" / "text.lmdb", a)
    b.mkdir()
    shutil.copyfile(a / "data.mdb", b / "data.mdb")
    if not (a / "lock.mdb").exists():
        (a / "lock.mdb").write_bytes(b"")
    os.link(a / "lock.mdb", b / "lock.mdb")
    first, second = TextStore(a), TextStore(b)
    assert first.texts(range(3)) == second.texts(range(3)) and len(second) == 380
