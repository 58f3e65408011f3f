// SPDX-License-Identifier: Apache-2.0
// Sequence lengths from a list, a text file, or a Megatron-LM index file.
#include <charconv>
#include <cstring>
#include <string_view>

#include "dcp/batch.h"
#include "util/excerpt.h"
#include "util/file.h"

namespace dcp {
namespace {

Result<int64_t> ParseLength(std::string_view text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument(
        fmt::format("'{}' is not a sequence length", internal::Excerpt(text)));
  }
  if (value < 1 || value > kMaxSequenceLength) {
    return Status::InvalidArgument(
        fmt::format("sequence length {} is not in [1, {}]", value, kMaxSequenceLength));
  }
  return value;
}

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Little-endian reader over a byte buffer that fails instead of reading past the end.
class ByteReader {
 public:
  explicit ByteReader(std::string_view data) : data_(data) {}

  template <typename T>
  bool Read(T* value) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(value, data_.data() + pos_, sizeof(T));  // x86-64 and aarch64 are little-endian
    pos_ += sizeof(T);
    return true;
  }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

}  // namespace

Result<std::vector<int64_t>> ParseLengthList(std::string_view text) {
  std::vector<int64_t> lengths;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    Result<int64_t> len = ParseLength(Trim(text.substr(start, comma - start)));
    if (!len.ok()) return len.status().WithContext(fmt::format("length list '{}'", text));
    lengths.push_back(*len);
    start = comma + 1;
  }
  return lengths;
}

Result<std::vector<int64_t>> ReadLengthsFile(const std::string& path) {
  DCP_ASSIGN_OR_RETURN(std::string data, internal::ReadWholeFile(path));
  std::vector<int64_t> lengths;
  std::string_view rest = data;
  for (int line = 1; !rest.empty(); ++line) {
    const size_t nl = rest.find('\n');
    std::string_view text = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    text = Trim(text.substr(0, text.find('#')));
    if (text.empty()) continue;
    Result<int64_t> len = ParseLength(text);
    if (!len.ok()) return len.status().WithContext(fmt::format("'{}' line {}", path, line));
    lengths.push_back(*len);
  }
  if (lengths.empty()) return Status::InvalidArgument(fmt::format("'{}' holds no lengths", path));
  return lengths;
}

Result<MegatronIndexLengths> ReadMegatronIndex(const std::string& path) {
  static constexpr std::string_view kMagic("MMIDIDX\0\0", 9);
  // Megatron-LM's older IndexedDataset (--dataset-impl lazy or cached) starts with this. Its
  // fairseq and Megatron variants share the magic and version but differ in their fields, so a
  // reader could not tell them apart with certainty: refuse it by name instead of guessing.
  static constexpr std::string_view kLegacyMagic("TNTIDX\0\0", 8);
  // Read into a Result kept alive, not moved out with DCP_ASSIGN_OR_RETURN: GCC 12 then warns
  // (wrongly) that the moved string's bytes may be uninitialized.
  const Result<std::string> read = internal::ReadWholeFile(path);
  if (!read.ok()) return read.status();
  const std::string_view data = *read;
  const auto corrupt = [&path](std::string_view what) {
    return Status::Corrupt(fmt::format("Megatron index '{}': {}", path, what));
  };
  if (data.starts_with(kLegacyMagic)) {
    return Status::Unsupported(fmt::format(
        "Megatron index '{}': the legacy indexed dataset format (TNTIDX, written with "
        "--dataset-impl lazy or cached) is not supported; convert it by re-running Megatron-LM's "
        "tools/preprocess_data.py with --dataset-impl mmap (its default), which writes an MMIDIDX "
        "index",
        path));
  }
  if (!data.starts_with(kMagic)) return corrupt("missing the MMIDIDX header");
  ByteReader reader(data.substr(kMagic.size()));
  uint64_t version = 0, n_sequences = 0, n_documents = 0;
  uint8_t dtype_code = 0;
  if (!reader.Read(&version) || !reader.Read(&dtype_code) || !reader.Read(&n_sequences) ||
      !reader.Read(&n_documents)) {
    return corrupt("truncated header");
  }
  if (version != 1) {
    return Status::Unsupported(
        fmt::format("Megatron index '{}': version {} is not supported (dcp reads version 1, the "
                    "only one Megatron-LM writes)",
                    path, version));
  }
  if (dtype_code < 1 || dtype_code > 8) return corrupt(fmt::format("dtype code {}", dtype_code));
  // Lengths (int32), then pointers (int64) and document indices (int64) must all be present.
  if (n_sequences > reader.remaining() / 12 ||
      n_documents > (reader.remaining() - 12 * n_sequences) / 8) {
    return corrupt(fmt::format("{} sequences and {} documents do not fit in the file", n_sequences,
                               n_documents));
  }
  // Megatron-LM writes a sequence of length 0 for an empty document; it has nothing to attend.
  MegatronIndexLengths out;
  out.lengths.reserve(n_sequences);
  for (uint64_t i = 0; i < n_sequences; ++i) {
    int32_t len = 0;
    reader.Read(&len);
    if (len < 0) return corrupt(fmt::format("sequence {} has length {}", i, len));
    if (len == 0) {
      ++out.empty_sequences;
    } else {
      out.lengths.push_back(len);
    }
  }
  if (out.lengths.empty()) {
    return Status::InvalidArgument(
        fmt::format("Megatron index '{}' holds no sequence of length >= 1 ({} sequences, {} empty)",
                    path, n_sequences, out.empty_sequences));
  }
  return out;
}

}  // namespace dcp
