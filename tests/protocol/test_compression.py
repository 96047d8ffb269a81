"""Tests of compression.py: round trips, and interop with the reference codec packages and kafka-python.

Every codec is checked both ways against an independent implementation: what Odradek writes must be
readable by python-snappy / lz4 / zstandard / the stdlib, and what those (and kafka-python's
``kafka.codec``, which mirrors the Java client's formats) write must be readable by Odradek.
"""

from __future__ import annotations

import gzip
import io
import random
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from kafka import codec as kafka_codec

from odradek.protocol.compression import (
    XERIAL_BLOCK_SIZE,
    XERIAL_MAGIC,
    Compression,
    compress,
    decompress,
    is_xerial,
)
from odradek.protocol.errors import CorruptRecordError, ErrorCode, UnsupportedCompressionError

# Mixed payload: incompressible and very compressible parts, larger than several codec blocks.
BIG = random.Random(2).randbytes(20_000) + b"kafka " * 30_000 + bytes(range(256)) * 100
PAYLOADS = [b"", b"x", b"hello kafka" * 3, BIG]
CODECS = list(Compression)


def test_codec_ids_are_kafkas() -> None:
    assert {c.name: c.value for c in Compression} == {
        "NONE": 0,
        "GZIP": 1,
        "SNAPPY": 2,
        "LZ4": 3,
        "ZSTD": 4,
    }


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip(codec: Compression, payload: bytes) -> None:
    packed = compress(codec, payload)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == payload
    assert decompress(int(codec), memoryview(packed)) == payload
    assert decompress(codec, bytearray(packed)) == payload


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_accepts_bytearray_and_memoryview_input(codec: Compression) -> None:
    payload = b"abc" * 1000
    for form in (bytearray(payload), memoryview(payload), memoryview(b"__" + payload)[2:]):
        assert decompress(codec, compress(codec, form)) == payload


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compression_actually_compresses(codec: Compression) -> None:
    payload = b"kafka " * 10_000
    assert len(compress(codec, payload)) < len(payload) // 10


def test_level_is_applied() -> None:
    payload = BIG
    assert decompress(Compression.GZIP, compress(Compression.GZIP, payload, level=1)) == payload
    assert decompress(Compression.ZSTD, compress(Compression.ZSTD, payload, level=19)) == payload
    assert compress(Compression.GZIP, payload, level=1) != compress(Compression.GZIP, payload, level=9)


# --- gzip ----------------------------------------------------------------------------------------


def test_gzip_interop_with_stdlib_and_kafka_python() -> None:
    ours = compress(Compression.GZIP, BIG)
    assert ours[:2] == b"\x1f\x8b"
    assert gzip.decompress(ours) == BIG
    assert kafka_codec.gzip_decode(ours) == BIG
    assert decompress(Compression.GZIP, gzip.compress(BIG)) == BIG
    assert decompress(Compression.GZIP, kafka_codec.gzip_encode(BIG)) == BIG


def test_gzip_multi_member_stream() -> None:
    assert decompress(Compression.GZIP, gzip.compress(b"one ") + gzip.compress(b"two")) == b"one two"


# --- snappy --------------------------------------------------------------------------------------


def xerial_blocks(stream: bytes) -> list[bytes]:
    """Split a xerial stream into its raw snappy blocks (independent parser for the tests)."""
    assert stream[:8] == XERIAL_MAGIC
    pos, blocks = 16, []
    while pos < len(stream):
        (n,) = struct.unpack_from(">i", stream, pos)
        blocks.append(stream[pos + 4 : pos + 4 + n])
        pos += 4 + n
    assert pos == len(stream)
    return blocks


def test_snappy_writes_xerial_framing_like_the_java_client() -> None:
    ours = compress(Compression.SNAPPY, BIG)
    assert ours[:16] == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    assert is_xerial(ours)
    blocks = [snappy.decompress(b) for b in xerial_blocks(ours)]
    assert b"".join(blocks) == BIG
    assert all(len(b) == XERIAL_BLOCK_SIZE for b in blocks[:-1])
    assert 0 < len(blocks[-1]) <= XERIAL_BLOCK_SIZE
    assert kafka_codec.snappy_decode(ours) == BIG


def test_snappy_empty_payload_is_a_bare_xerial_header() -> None:
    ours = compress(Compression.SNAPPY, b"")
    assert ours == XERIAL_MAGIC + struct.pack(">ii", 1, 1)
    assert decompress(Compression.SNAPPY, ours) == b""


def test_snappy_reads_xerial_from_kafka_python() -> None:
    theirs = kafka_codec.snappy_encode(BIG, xerial_compatible=True)
    assert is_xerial(theirs)
    assert decompress(Compression.SNAPPY, theirs) == BIG
    small_blocks = kafka_codec.snappy_encode(BIG, xerial_compatible=True, xerial_blocksize=1000)
    assert decompress(Compression.SNAPPY, small_blocks) == BIG


def test_snappy_reads_raw_snappy() -> None:
    for raw in (snappy.compress(BIG), kafka_codec.snappy_encode(BIG, xerial_compatible=False)):
        assert not is_xerial(raw)
        assert decompress(Compression.SNAPPY, raw) == BIG


def test_snappy_ignores_xerial_version_byte_order() -> None:
    # Some producers write the two version ints little-endian; the magic alone identifies the framing.
    ours = bytearray(compress(Compression.SNAPPY, BIG))
    ours[8:16] = struct.pack("<ii", 1, 1)
    assert decompress(Compression.SNAPPY, bytes(ours)) == BIG


# --- lz4 -----------------------------------------------------------------------------------------


def test_lz4_writes_a_standard_frame_with_independent_blocks() -> None:
    ours = compress(Compression.LZ4, BIG)
    assert ours[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic 0x184D2204, little-endian
    flg = ours[4]
    assert flg >> 6 == 0b01  # frame version 1
    assert flg & 0x20, "blocks must be independent: Kafka's Java reader cannot follow linked blocks"
    assert (ours[5] >> 4) & 0x7 == 4  # 64 KiB maximum block size, as the Java client writes
    assert lz4.frame.decompress(ours) == BIG
    assert kafka_codec.lz4_decode(ours) == BIG


@pytest.mark.parametrize("linked", [False, True])
@pytest.mark.parametrize("checksum", [False, True])
def test_lz4_reads_frames_from_python_lz4(linked: bool, checksum: bool) -> None:
    theirs = lz4.frame.compress(BIG, block_linked=linked, content_checksum=checksum, store_size=checksum)
    assert decompress(Compression.LZ4, theirs) == BIG


def test_lz4_reads_kafka_python() -> None:
    assert decompress(Compression.LZ4, kafka_codec.lz4_encode(BIG)) == BIG


# --- zstd ----------------------------------------------------------------------------------------


def test_zstd_interop() -> None:
    ours = compress(Compression.ZSTD, BIG)
    assert ours[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompress(ours) == BIG
    assert kafka_codec.zstd_decode(ours) == BIG
    assert decompress(Compression.ZSTD, zstandard.ZstdCompressor().compress(BIG)) == BIG
    assert decompress(Compression.ZSTD, kafka_codec.zstd_encode(BIG)) == BIG


def test_zstd_reads_streamed_frames_without_content_size() -> None:
    # The Java client writes through zstd-jni's stream, which does not record the content size.
    out = io.BytesIO()
    with zstandard.ZstdCompressor(write_content_size=False).stream_writer(out, closefd=False) as writer:
        writer.write(BIG)
    assert decompress(Compression.ZSTD, out.getvalue()) == BIG


def test_zstd_reads_concatenated_frames() -> None:
    two = zstandard.ZstdCompressor().compress(b"first ") + zstandard.ZstdCompressor().compress(b"second")
    assert decompress(Compression.ZSTD, two) == b"first second"


# --- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("codec_id", [5, 6, 7, -1, 99])
def test_unknown_codec(codec_id: int) -> None:
    with pytest.raises(UnsupportedCompressionError, match=f"codec id {codec_id}") as exc_info:
        compress(codec_id, b"data")
    assert exc_info.value.code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    with pytest.raises(UnsupportedCompressionError, match="zstd=4"):
        decompress(codec_id, b"data")


def _truncated(codec: Compression) -> bytes:
    packed = compress(codec, BIG)
    return packed[: len(packed) // 2]


CORRUPT = [
    (Compression.GZIP, b""),
    (Compression.GZIP, b"not gzip at all"),
    (Compression.GZIP, _truncated(Compression.GZIP)),
    (Compression.GZIP, compress(Compression.GZIP, BIG)[:-4] + b"\x00\x00\x00\x00"),  # bad ISIZE
    (Compression.SNAPPY, b"\xff\xff\xff\xff\x0fnot snappy"),
    (Compression.SNAPPY, snappy.compress(BIG)[:-10]),
    (Compression.SNAPPY, _truncated(Compression.SNAPPY)),
    (Compression.SNAPPY, XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00"),  # stray bytes
    (Compression.SNAPPY, XERIAL_MAGIC + struct.pack(">iii", 1, 1, -3) + b"abc"),  # negative length
    (Compression.SNAPPY, XERIAL_MAGIC + struct.pack(">iii", 1, 1, 3) + b"\xff\xff\xff"),  # bad block
    (Compression.LZ4, b""),
    (Compression.LZ4, b"not lz4 at all"),
    (Compression.LZ4, _truncated(Compression.LZ4)),
    (Compression.ZSTD, b""),
    (Compression.ZSTD, b"not zstd at all"),
    (Compression.ZSTD, _truncated(Compression.ZSTD)),
]


@pytest.mark.parametrize(("codec", "data"), CORRUPT, ids=lambda x: x.name if isinstance(x, Compression) else "")
def test_corrupt_input_raises_corrupt_record_error(codec: Compression, data: bytes) -> None:
    with pytest.raises(CorruptRecordError) as exc_info:
        decompress(codec, data)
    err = exc_info.value
    assert type(err) is CorruptRecordError
    assert err.code == ErrorCode.CORRUPT_MESSAGE
    assert codec.name.lower() in str(err)


def test_lz4_block_checksum_catches_a_flipped_byte() -> None:
    packed = bytearray(compress(Compression.LZ4, BIG))
    packed[len(packed) // 2] ^= 0x55
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(Compression.LZ4, bytes(packed))


def test_gzip_crc_catches_a_flipped_byte() -> None:
    packed = bytearray(compress(Compression.GZIP, BIG))
    packed[len(packed) // 2] ^= 0x55
    with pytest.raises(CorruptRecordError, match="gzip"):
        decompress(Compression.GZIP, bytes(packed))
