"""Which of a trial's checkpoints are kept: the newest few and the best, nothing else.

Pure module (files only). Notes that set a checkpoint aside (and their files) are pruned
like checkpoints of their epoch: once ``keep_last`` newer valid checkpoints exist, they
go. Files no manifest or note refers to (a writer killed before its manifest, an epoch
written again) and temporary files go at once: no live writer shares a trial's folder.
"""

from __future__ import annotations

from hpsearch.recovery import storage
from hpsearch.recovery.checkpoint_layout import Entry, is_data, scan
from hpsearch.spec.objective import mode_sign


class Retention:
    """Keeps a trial's newest ``keep_last`` checkpoints and its best one.

    Args:
        keep_last: Newest checkpoints kept (besides the best); at least 1.
        mode: ``max`` or ``min``: which objective value is the best.

    Raises:
        ValueError: ``keep_last`` below 1.
    """

    def __init__(self, keep_last: int = 2, mode: str = "max"):
        if keep_last < 1:
            raise ValueError("keep_last must be >= 1")
        self.keep_last = keep_last
        self.mode = mode

    def best(self, entries: list[Entry]) -> Entry | None:
        """The checkpoint with the best objective (the newest among equals)."""
        scored = [e for e in entries if e.metric is not None]
        if not scored:
            return None
        sign = mode_sign(self.mode)
        return max(scored, key=lambda e: (sign * e.metric, e.epoch))

    def prune(self, files: storage.Files) -> int:
        """Remove what is not kept (see the module docstring); return the bytes the
        kept checkpoints hold."""
        listing = scan(files)
        entries, notes = listing.entries, listing.notes
        newest = entries[-self.keep_last:]
        keep = {e.manifest for e in newest}
        best = self.best(entries)
        if best is not None:
            keep.add(best.manifest)
        kept = [e for e in entries if e.manifest in keep]
        for entry in entries:
            if entry.manifest not in keep:
                files.delete(entry.manifest)
                files.delete_dir(entry.data)
        held = {e.data for e in kept}
        if len(newest) >= self.keep_last:
            oldest_kept = newest[0].epoch
            for note in notes:
                if note.epoch < oldest_kept:
                    _remove(files, note.name, is_dir=note.name == note.data)
            notes = [n for n in notes if n.epoch >= oldest_kept]
        held |= {note.data for note in notes}
        for item in listing.others:
            if is_data(item.name) and item.name not in held:
                files.delete_dir(item.name)
            elif item.name.startswith(".tmp-"):
                _remove(files, item.name, item.is_dir)
        return sum(e.size for e in kept)


def _remove(files: storage.Files, name: str, is_dir: bool) -> None:
    if is_dir:
        files.delete_dir(name)
    else:
        files.delete(name)
