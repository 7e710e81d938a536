"""tools/rbe/blob_cache.py: only blobs matching their digest are stored and
used; the CAS is asked for each blob once; batches respect the REAPI limits."""

import collections
import hashlib
import os
import stat

import pytest
from hypothesis import given, strategies as st

import blob_cache

Digest = collections.namedtuple("Digest", "hash size_bytes")


def digest_of(data):
    return Digest(hashlib.sha256(data).hexdigest(), len(data))


class FakeCas:
    """The Downloader's two calls over a dict of hash -> bytes, counting requests."""

    def __init__(self, blobs):
        self.blobs = blobs
        self.requested = []

    def get_available_blobs(self, digests):
        self.requested += [d.hash for d in digests]
        return [(self.blobs[d.hash], d) for d in digests if d.hash in self.blobs]

    def get_blob(self, digest):
        self.requested.append(digest.hash)
        return self.blobs.get(digest.hash)


def test_fetches_once_and_stores_read_only(tmp_path):
    data = b"int main() {}\n"
    d = digest_of(data)
    cas = FakeCas({d.hash: data})
    cache = blob_cache.BlobCache(str(tmp_path), cas)
    assert cache.read(d) == data
    assert cache.read(d) == data
    assert cas.requested == [d.hash]
    assert stat.S_IMODE(os.stat(cache.path(d)).st_mode) == 0o444


@pytest.mark.parametrize("large", [False, True], ids=["batched", "streamed"])
def test_a_blob_not_matching_its_digest_is_refused(tmp_path, monkeypatch, large):
    if large:
        monkeypatch.setattr(blob_cache, "BATCH_BYTES", 4)
    good, bad = b"good blob", b"tampered"
    d_good, d_bad = digest_of(good), digest_of(b"original")
    cache = blob_cache.BlobCache(str(tmp_path), FakeCas({d_good.hash: good, d_bad.hash: bad}))
    with pytest.raises(blob_cache.MissingBlobs, match="do not match their digest") as error:
        cache.ensure([d_good, d_bad])
    assert error.value.digests == [d_bad]
    assert not os.path.exists(cache.path(d_bad))
    assert open(cache.path(d_good), "rb").read() == good


def test_missing_blobs_are_named(tmp_path):
    d = digest_of(b"never uploaded")
    cache = blob_cache.BlobCache(str(tmp_path), FakeCas({}))
    with pytest.raises(blob_cache.MissingBlobs, match="missing from the CAS") as error:
        cache.ensure([d])
    assert error.value.digests == [d] and d.hash in str(error.value)


def test_link_shares_plain_blobs_and_copies_executables(tmp_path):
    data = b"#!/bin/sh\n"
    d = digest_of(data)
    cache = blob_cache.BlobCache(str(tmp_path / "cas"), FakeCas({d.hash: data}))
    cache.ensure([d])
    cache.link(d, str(tmp_path / "plain"), executable=False)
    cache.link(d, str(tmp_path / "tool"), executable=True)
    assert os.path.samefile(tmp_path / "plain", cache.path(d))
    assert stat.S_IMODE(os.stat(tmp_path / "tool").st_mode) == 0o555
    assert (tmp_path / "tool").read_bytes() == data


def test_batches_hold_at_most_batch_count_digests():
    digests = [Digest("%064x" % i, 1) for i in range(2 * blob_cache.BATCH_COUNT + 500)]
    assert [len(b) for b in blob_cache.batches(digests)] == [blob_cache.BATCH_COUNT] * 2 + [500]


@given(st.lists(st.one_of(st.integers(0, 4096), st.integers(0, blob_cache.BATCH_BYTES)),
                max_size=300))
def test_batches_keep_every_digest_within_the_limits(sizes):
    digests = [Digest("%064x" % i, size) for i, size in enumerate(sizes)]
    batches = list(blob_cache.batches(digests))
    assert [d for batch in batches for d in batch] == digests
    for batch in batches:
        assert 0 < len(batch) <= blob_cache.BATCH_COUNT
        assert len(batch) == 1 or sum(d.size_bytes for d in batch) <= blob_cache.BATCH_BYTES
