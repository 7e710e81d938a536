"""The bot's local content-addressed store: verified blobs on disk, named by
their hash, fetched from the CAS once per worker (torch's headers cross the
wire once, not once per action) and hard-linked into each action's inputs.

A blob whose content does not match its digest is never stored: the caller
gets MissingBlobs, which the bot reports as FAILED_PRECONDITION, the REAPI's
way to say "upload this again".
"""

import hashlib
import logging
import os
import shutil
import tempfile

log = logging.getLogger("worker")

# Blobs up to this size are fetched in batches; larger ones stream (ByteStream).
BATCH_BYTES = 2 * 1024 * 1024
# BatchReadBlobs requests hold at most this many digests.
BATCH_COUNT = 1000


class MissingBlobs(Exception):
    """Blobs absent from the CAS, or present but not matching their digest."""

    def __init__(self, digests, why):
        super().__init__("%d blob(s) %s: %s" % (len(digests), why, ", ".join(
            "%s/%d" % (d.hash, d.size_bytes) for d in digests[:3])))
        self.digests = digests


def batches(digests):
    """Splits small digests into BatchReadBlobs-sized lists."""
    batch, size = [], 0
    for digest in digests:
        if batch and (size + digest.size_bytes > BATCH_BYTES or len(batch) >= BATCH_COUNT):
            yield batch
            batch, size = [], 0
        batch.append(digest)
        size += digest.size_bytes
    if batch:
        yield batch


class BlobCache:
    """Verified blobs in folder; downloader is BuildGrid's CAS Downloader (any
    object with get_available_blobs(digests) and get_blob(digest))."""

    def __init__(self, folder, downloader):
        self.folder = folder
        self.downloader = downloader
        os.makedirs(folder, exist_ok=True)

    def path(self, digest, executable=False):
        return os.path.join(self.folder, digest.hash + (".x" if executable else ""))

    def _store(self, digest, data):
        """Stores data under digest if it matches it; says whether it did."""
        if hashlib.sha256(data).hexdigest() != digest.hash or len(data) != digest.size_bytes:
            return False
        fd, tmp = tempfile.mkstemp(dir=self.folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o444)
        os.replace(tmp, self.path(digest))
        return True

    def _fetch(self, digests):
        """Yields (digest, its data or None when the CAS lacks it)."""
        small = [d for d in digests if d.size_bytes <= BATCH_BYTES]
        for batch in batches(small):
            found = {d.hash: data for data, d in self.downloader.get_available_blobs(batch)}
            for digest in batch:
                yield digest, found.get(digest.hash)
        for digest in digests:
            if digest.size_bytes > BATCH_BYTES:
                yield digest, self.downloader.get_blob(digest)

    def ensure(self, digests):
        """Makes every digest present in the cache; raises MissingBlobs otherwise."""
        wanted = {d.hash: d for d in digests if not os.path.exists(self.path(d))}
        missing, corrupt = [], []
        for digest, data in self._fetch(list(wanted.values())):
            if data is None:
                missing.append(digest)
            elif not self._store(digest, data):
                corrupt.append(digest)
        if corrupt:
            log.error("REJECTED %d blob(s) whose content does not match their digest: %s",
                      len(corrupt), ", ".join(d.hash[:12] for d in corrupt[:5]))
            raise MissingBlobs(corrupt + missing, "do not match their digest")
        if missing:
            raise MissingBlobs(missing, "are missing from the CAS")

    def read(self, digest):
        self.ensure([digest])
        with open(self.path(digest), "rb") as f:
            return f.read()

    def link(self, digest, dest, executable):
        """Hard-links the (present) blob to dest; executables get their own copy."""
        source = self.path(digest, executable)
        if executable and not os.path.exists(source):
            fd, tmp = tempfile.mkstemp(dir=self.folder)
            os.close(fd)
            shutil.copyfile(self.path(digest), tmp)
            os.chmod(tmp, 0o555)
            os.replace(tmp, source)
        os.link(source, dest)
