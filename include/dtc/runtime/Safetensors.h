//===- Safetensors.h - read and write .safetensors files ---------*- C++
//-*-===//
//
// Format: 8-byte little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
//  "__metadata__": {"key": "value"}}, then the data; offsets are relative to
// the start of the data and must tile it exactly.
//
// dtc adds `"dtc.data_crc32c": "<8 hex digits>"` to the metadata: the
// CRC-32C (Castagnoli) of the whole data section. Readers verify it when it
// is present (verifyChecksum); files of other writers simply lack it.
//
// Files are read with pread into the caller's memory, never mapped: a file
// that shrinks while it is read is an error naming it, not a signal.
//
// Internal to the runtime: throws dtc::rt::Error("PATH: what is wrong").
//
//===----------------------------------------------------------------------===//
#ifndef DTC_RUNTIME_SAFETENSORS_H
#define DTC_RUNTIME_SAFETENSORS_H

#include "dtc/artifact/OutputFile.h"
#include "dtc/artifact/Types.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dtc::rt {

/// "F32", "I32", "I64".
const char *safetensorsDtype(DType d);

/// The metadata key of the data section's checksum.
constexpr const char *kDataChecksumKey = "dtc.data_crc32c";
/// Block checksums, for readers that read part of a file: the data section
/// cut in blocks of `dtc.crc_block_bytes` bytes (the last one shorter), and
/// `dtc.block_crc32c` = the CRC-32C of each block as 8 lowercase hex digits,
/// concatenated in order.
constexpr const char *kBlockBytesKey = "dtc.crc_block_bytes";
constexpr const char *kBlockChecksumsKey = "dtc.block_crc32c";

/// CRC-32C (Castagnoli, reflected, as iSCSI and ext4 use it) of `size`
/// bytes, continuing from `crc` (0 to start): crc32c(0, "123456789", 9) is
/// 0xe3069283.
uint32_t crc32c(uint32_t crc, const void *data, size_t size);

struct SafetensorsEntry {
  std::string name;
  std::string dtypeName;  ///< as written ("F32", "BF16", ...)
  bool supported = false; ///< dtype is F32, BF16, F16, I32 or I64
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0, end = 0; ///< relative to the data section
};

/// A validated safetensors file (header parsed, offsets checked against the
/// file size); data is read on demand.
class SafetensorsReader {
public:
  explicit SafetensorsReader(const std::string &path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader &) = delete;
  SafetensorsReader &operator=(const SafetensorsReader &) = delete;

  const std::string &path() const { return path_; }
  const std::map<std::string, std::string> &metadata() const { return meta_; }
  const std::vector<SafetensorsEntry> &entries() const { return entries_; }
  const SafetensorsEntry *find(const std::string &name) const;
  /// Reads `size` bytes at byte `offset` of tensor `e` into `dst`.
  void read(const SafetensorsEntry &e, uint64_t offset, void *dst,
            size_t size) const;
  /// Verifies dtc.data_crc32c when the file carries one (reading the data
  /// section once); returns whether it did.
  bool verifyChecksum() const;
  /// The same in pieces, for callers that pace the reading: whether there
  /// is a checksum, the data section's size, the CRC of `size` data bytes
  /// at `offset` continuing `crc`, and the final comparison (throws).
  bool hasChecksum() const { return meta_.count(kDataChecksumKey) != 0; }
  uint64_t dataBytes() const { return size_ - dataStart_; }
  uint32_t dataCrc(uint64_t offset, uint64_t size, uint32_t crc) const;
  void checkChecksum(uint32_t crc) const;

  /// Whether the file carries block checksums (kBlockChecksumsKey).
  bool hasBlockChecksums() const { return blockBytes_ != 0; }
  /// Like read(), but through the blocks that hold the bytes, each read
  /// whole and verified against its checksum once (throws naming the file
  /// and the block on a mismatch). The last verified block is kept, so
  /// reads in increasing order read every block once; that one block is
  /// all the memory this needs. Requires hasBlockChecksums().
  void readVerified(const SafetensorsEntry &e, uint64_t offset, void *dst,
                    size_t size) const;

private:
  void readAt(uint64_t offset, void *dst, size_t size) const;
  uint64_t blockBytes_ = 0;
  std::vector<uint32_t> blockCrcs_;
  mutable int64_t cachedBlock_ = -1;
  mutable std::vector<char> cache_;
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0, dataStart_ = 0;
  std::map<std::string, std::string> meta_;
  std::vector<SafetensorsEntry> entries_;
};

struct SafetensorsTensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t bytes() const { return uint64_t(numel(shape)) * dtypeSize(dtype); }
};

/// Writes a file tensor by tensor: the header goes out first (from the
/// names, dtypes and shapes), then each tensor's bytes in order, so a
/// writer never holds more than the tensor it is writing. Through an
/// OutputFile: a regular file is replaced atomically at commit(), and the
/// checksum (dtc.data_crc32c) is filled in then; an output that cannot seek
/// (a FIFO, /dev/null) gets no checksum.
class SafetensorsWriter {
public:
  /// With `blockBytes` > 0 (and a seekable output) the file also gets
  /// block checksums (kBlockChecksumsKey) over blocks of that size.
  SafetensorsWriter(const std::string &path,
                    std::vector<SafetensorsTensorInfo> tensors,
                    std::map<std::string, std::string> metadata,
                    uint64_t blockBytes = 0);
  /// Bytes written so far, header included (the file's size after commit()).
  uint64_t fileBytes() const { return headerBytes_ + written_; }
  /// Appends bytes of the current tensor (any split; in tensor order).
  void write(const void *data, size_t bytes);
  /// Checks that every tensor was written in full, then commits.
  void commit();
  /// Unless committed, the target is untouched and the temporary removed.
  ~SafetensorsWriter();

private:
  [[noreturn]] void fail(const std::string &why);
  std::string path_;
  OutputFile out_;
  uint64_t dataBytes_ = 0, written_ = 0;
  uint64_t checksumOffset_ = 0; ///< of the 8 placeholder digits, 0 = none
  uint32_t crc_ = 0;
  uint64_t headerBytes_ = 0;
  uint64_t blockBytes_ = 0,
           blockOffset_ = 0; ///< block size, its placeholder's offset
  uint32_t blockCrc_ = 0;
  std::string blockDigits_; ///< of the blocks done
};

struct SafetensorsTensor {
  std::string name;
  DType dtype;
  Shape shape;
  const void *data; ///< numel(shape) * dtypeSize(dtype) bytes
};

/// A whole file at once (through SafetensorsWriter).
void writeSafetensors(const std::string &path,
                      const std::vector<SafetensorsTensor> &tensors,
                      const std::map<std::string, std::string> &metadata);

} // namespace dtc::rt

#endif // DTC_RUNTIME_SAFETENSORS_H
