"""Kafka's compression codecs behind one interface: ``compress(codec, data)`` / ``decompress(codec, data)``.

Codec ids are the values of a batch's attributes bits 0-2 and are never renumbered:
none=0, gzip=1, snappy=2, lz4=3, zstd=4. All codecs are backed by cramjam (Rust, releases the GIL).

Wire formats, as Kafka's clients write them:

- gzip: an RFC 1952 gzip stream (Java's ``GZIPOutputStream``).
- snappy: the xerial "snappy-java" stream framing, which is what the Java client writes::

      header   8 bytes magic b"\\x82SNAPPY\\x00", int32 version (1), int32 min-compatible version (1)
      blocks   repeated: int32 length (big-endian), then that many bytes of one raw snappy block

  Each block holds at most 32 KiB of uncompressed data (snappy-java's default). Some producers
  (librdkafka with some settings, older kafka-python, other brokers) send one raw snappy block with
  no framing; ``decompress`` accepts both, recognising xerial by its 8-byte magic. Some writers are
  known to put the two version ints little-endian, so they are not checked.
- lz4: the standard LZ4 *frame* format (magic 0x184D2204) with independent blocks of at most 64 KiB;
  Kafka's Java reader decompresses each block on its own and cannot follow linked blocks.
- zstd: a standard zstd frame (several concatenated frames are accepted on decompress).

Invariants:
- ``decompress(c, compress(c, data)) == data`` for every codec ``c``.
- ``decompress`` raises ``CorruptRecordError`` for damaged input and ``UnsupportedCompressionError``
  for an unknown codec id; no exception of the underlying library escapes.
- Nothing here bounds the size of the output: callers that decompress untrusted input should bound
  the input size (a batch is already bounded by ``max.message.bytes``).
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from odradek.protocol.errors import CorruptRecordError, UnsupportedCompressionError

__all__ = [
    "XERIAL_MAGIC",
    "Compression",
    "codec_from_id",
    "compress",
    "decompress",
    "is_xerial",
]


class Compression(IntEnum):
    """Kafka's codec ids (record batch attributes bits 0-2, topic config ``compression.type``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Levels that match the Java client's defaults (GZIPOutputStream, zstd-jni; KIP-390).
DEFAULT_GZIP_LEVEL = 6
DEFAULT_LZ4_LEVEL = 1
DEFAULT_ZSTD_LEVEL = 3

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
XERIAL_HEADER_SIZE = _XERIAL_HEADER.size  # 16
_XERIAL_VERSION = 1
_XERIAL_COMPATIBLE_VERSION = 1
XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")

_Bytes = bytes | bytearray | memoryview


def codec_from_id(codec: int) -> Compression:
    """The ``Compression`` for a wire codec id; ``UnsupportedCompressionError`` if Kafka defines none."""
    try:
        return Compression(codec)
    except ValueError:
        known = ", ".join(f"{c.name.lower()}={c.value}" for c in Compression)
        raise UnsupportedCompressionError(f"unknown compression codec id {codec}: Kafka defines {known}") from None


def compress(codec: int, data: _Bytes, *, level: int | None = None) -> bytes:
    """Compress ``data`` the way Kafka's Java client does for ``codec``.

    ``level`` overrides the codec's default level (ignored for none and snappy).
    """
    kind = codec_from_id(codec)
    if kind is Compression.NONE:
        return bytes(data)
    if kind is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data, level=DEFAULT_GZIP_LEVEL if level is None else level))
    if kind is Compression.SNAPPY:
        return _xerial_compress(data)
    if kind is Compression.LZ4:
        compressor = cramjam.lz4.Compressor(
            level=DEFAULT_LZ4_LEVEL if level is None else level,
            content_checksum=False,
            block_linked=False,
        )
        # The streaming compressor (the only cramjam API that can unlink blocks) takes bytes only.
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    return bytes(cramjam.zstd.compress(data, level=DEFAULT_ZSTD_LEVEL if level is None else level))


def decompress(codec: int, data: _Bytes) -> bytes:
    """Decompress ``data`` written by any Kafka client with ``codec``.

    Raises ``UnsupportedCompressionError`` for an unknown codec id and ``CorruptRecordError`` when
    ``data`` is not a valid stream of that codec.
    """
    kind = codec_from_id(codec)
    if kind is Compression.NONE:
        return bytes(data)
    try:
        if kind is Compression.SNAPPY:
            if is_xerial(data):
                return _xerial_decompress(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if kind is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if kind is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam.DecompressionError and anything else the codec throws
        raise CorruptRecordError(
            f"{kind.name.lower()}-compressed record data ({len(data)} bytes) cannot be decompressed: {exc}"
        ) from exc


def is_xerial(data: _Bytes) -> bool:
    """True when ``data`` starts with snappy-java's stream header."""
    return len(data) >= XERIAL_HEADER_SIZE and bytes(data[: len(XERIAL_MAGIC)]) == XERIAL_MAGIC


def _xerial_compress(data: _Bytes) -> bytes:
    view = memoryview(data).cast("B")
    out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_COMPATIBLE_VERSION))
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        out += _BLOCK_LENGTH.pack(len(block))
        out += block
    return bytes(out)


def _xerial_decompress(data: _Bytes) -> bytes:
    view = memoryview(data).cast("B")
    end = len(view)
    pos = XERIAL_HEADER_SIZE
    parts: list[bytes] = []
    while pos < end:
        if end - pos < _BLOCK_LENGTH.size:
            raise CorruptRecordError(
                f"snappy (xerial) stream is truncated: {end - pos} stray bytes at byte {pos} where a "
                "4-byte block length was expected"
            )
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or length > end - pos:
            raise CorruptRecordError(
                f"snappy (xerial) block at byte {pos - _BLOCK_LENGTH.size} declares {length} bytes but "
                f"{end - pos} remain in the stream"
            )
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + length])))
        pos += length
    return b"".join(parts)
