"""Kafka's record-batch compression codecs, through cramjam (never a hand-written codec).

Sans-I/O. Kafka's attribute bits 0-2 name the codec (CODECS); what each means on the wire:

- gzip: a gzip stream (RFC 1952).
- snappy: Kafka's Java client writes xerial's framing (``SnappyOutputStream``: a 16-byte
  header ``\\x82SNAPPY\\x00``, version 1, compatible version 1, then blocks of a 4-byte
  big-endian length and a raw snappy block of at most 32 KiB uncompressed); librdkafka
  and kafka-python may also send one raw snappy block. Both decode; we write xerial, the
  framing every client reads.
- lz4: the LZ4 frame format with independent blocks (Kafka's Java reader refuses linked
  blocks), 64 KiB blocks, lz4's fast mode (level 1; the HC levels cost 20x the time).
- zstd: a zstd frame (level 3, Kafka's default).

Levels: our log stores records uncompressed, so a fetch compresses where Kafka's broker
would send the producer's bytes: the levels favour speed (gzip 1 is ~5x faster than
Kafka's default 6 for ~6% more bytes).

``decompress`` bounds the output at ``max_bytes`` (a small compressed batch may not
become gigabytes) and raises CompressionError for anything it cannot decode.
"""
from __future__ import annotations

import struct

import cramjam
import numpy as np

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODECS = {"gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}
NAMES = {code: name for name, code in CODECS.items()} | {CODEC_NONE: "none"}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
XERIAL_VERSION = 1
XERIAL_BLOCK = struct.Struct(">i")
XERIAL_BLOCK_BYTES = 32 * 1024  # xerial's default block size, as Kafka's Java producer
GZIP_LEVEL = 1  # Kafka's default is 6: 5x the time (see above)
LZ4_LEVEL = 1  # lz4's fast mode; Kafka's Java default (9) is an HC level
ZSTD_LEVEL = 3  # Kafka's default
# The first output buffer of ``decompress``: this many times the compressed size (then
# the limit): records rarely compress 16x, and a buffer of the limit costs page faults.
FIRST_GUESS_RATIO = 16
FIRST_GUESS_MIN_BYTES = 64 * 1024


class CompressionError(ValueError):
    """Compressed data that does not decode (``too_large`` False), or decodes to more
    than the limit (True)."""

    def __init__(self, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


def compress(codec: int, data) -> bytes:
    """``data`` compressed with Kafka's codec ``codec`` (CODEC_GZIP..CODEC_ZSTD)."""
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL))
    if codec == CODEC_SNAPPY:
        return _xerial_compress(data)
    if codec == CODEC_LZ4:
        compressor = cramjam.lz4.Compressor(level=LZ4_LEVEL, content_checksum=False,
                                            block_linked=False)
        compressor.compress(bytes(data))
        return bytes(compressor.finish())
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise ValueError(f"no compression codec {codec}")


def decompress(codec: int, data, max_bytes: int) -> memoryview:
    """``data`` decompressed; at most ``max_bytes`` bytes or CompressionError."""
    data = bytes(data)
    try:
        if codec == CODEC_SNAPPY:
            if data.startswith(XERIAL_MAGIC):
                return _xerial_decompress(data, max_bytes)
            return _snappy_raw(data, max_bytes)
        module = {CODEC_GZIP: cramjam.gzip, CODEC_LZ4: cramjam.lz4,
                  CODEC_ZSTD: cramjam.zstd}.get(codec)
        if module is None:
            raise ValueError(f"no compression codec {codec}")
        guess = min(max_bytes, max(FIRST_GUESS_MIN_BYTES, FIRST_GUESS_RATIO * len(data)))
        try:
            return _decompress_into(module, data, guess)
        except cramjam.DecompressionError:
            if guess >= max_bytes:
                raise
        return _decompress_into(module, data, max_bytes)
    except cramjam.DecompressionError as e:
        too_large = "whole buffer" in str(e)  # cramjam's words for "output buffer full"
        raise CompressionError(f"{NAMES.get(codec, codec)}: cannot decompress "
                               f"({_brief(e)}; limit {max_bytes} bytes)", too_large) from None


def _decompress_into(module, data: bytes, limit: int) -> memoryview:
    # np.empty reserves address space only: pages are touched as they are written. One
    # byte over the limit tells "exactly the limit" from "more".
    out = np.empty(limit + 1, np.uint8)
    size = module.decompress_into(data, out)
    if size > limit:
        raise cramjam.DecompressionError("failed to write whole buffer")
    return memoryview(out)[:size]


def _brief(e: Exception) -> str:
    return str(e).splitlines()[0][:120] if str(e) else type(e).__name__


def _snappy_raw(data: bytes, max_bytes: int) -> memoryview:
    size = cramjam.snappy.decompress_raw_len(data)
    if size > max_bytes:
        raise CompressionError(f"snappy: a block of {size} bytes is over the limit of "
                               f"{max_bytes}", too_large=True)
    out = bytearray(size)
    written = cramjam.snappy.decompress_raw_into(data, out)
    if written != size:
        raise CompressionError(f"snappy: block decodes to {written} bytes, said {size}")
    return memoryview(out)


def _xerial_decompress(data: bytes, max_bytes: int) -> memoryview:
    if len(data) < XERIAL_HEADER.size:
        raise CompressionError("snappy: truncated xerial header")
    position = XERIAL_HEADER.size
    blocks = []
    total = 0
    while position < len(data):
        if position + XERIAL_BLOCK.size > len(data):
            raise CompressionError("snappy: truncated xerial block length")
        (length,) = XERIAL_BLOCK.unpack_from(data, position)
        position += XERIAL_BLOCK.size
        if length < 0 or position + length > len(data):
            raise CompressionError(f"snappy: xerial block of {length} bytes runs past the end")
        block = _snappy_raw(data[position:position + length], max_bytes - total)
        total += len(block)
        blocks.append(block)
        position += length
    return memoryview(b"".join(blocks))


def _xerial_compress(data) -> bytes:
    view = memoryview(data).cast("B")
    parts = [XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_VERSION)]
    for start in range(0, len(view), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_BYTES]))
        parts += [XERIAL_BLOCK.pack(len(block)), block]
    return b"".join(parts)
