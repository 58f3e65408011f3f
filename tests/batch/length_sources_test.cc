// SPDX-License-Identifier: Apache-2.0
// Length sources: the comma-separated list, the text file and the Megatron-LM index file. The
// files are written byte by byte by the tests, so the format is checked against its description
// (include/dcp/batch.h), not against a file the library wrote.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "dcp/batch.h"

namespace dcp {
namespace {

// A file under the test temp directory, unique to this test and process, removed at the end.
class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = ::testing::TempDir() + "dcp_" + info->test_suite_name() + "_" + info->name() + "_" +
            std::to_string(::getpid()) + "_" + std::to_string(counter_++);
    std::ofstream out(path_, std::ios::binary);
    out << contents;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

void ExpectError(const Status& status, StatusCode code, const std::string& substring) {
  ASSERT_FALSE(status.ok()) << "expected an error naming '" << substring << "'";
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_NE(status.message().find(substring), std::string::npos)
      << "message '" << status.message() << "' does not name '" << substring << "'";
}

// ---------------------------------------------------------------------------------------------
// ParseLengthList

TEST(ParseLengthList, ParsesCommaSeparatedLengths) {
  const Result<std::vector<int64_t>> lengths = ParseLengthList("4096,1000,17");
  ASSERT_TRUE(lengths.ok()) << lengths.status().ToString();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{4096, 1000, 17}));
}

TEST(ParseLengthList, ParsesASingleLength) {
  const Result<std::vector<int64_t>> lengths = ParseLengthList("1");
  ASSERT_TRUE(lengths.ok()) << lengths.status().ToString();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{1}));
}

TEST(ParseLengthList, IgnoresSpacesAroundLengths) {
  const Result<std::vector<int64_t>> lengths = ParseLengthList(" 4096 , 1000,\t17 ");
  ASSERT_TRUE(lengths.ok()) << lengths.status().ToString();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{4096, 1000, 17}));
}

TEST(ParseLengthList, AcceptsTheMaximumLength) {
  const Result<std::vector<int64_t>> lengths = ParseLengthList(std::to_string(kMaxSequenceLength));
  ASSERT_TRUE(lengths.ok()) << lengths.status().ToString();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{kMaxSequenceLength}));
}

TEST(ParseLengthList, RejectsAnEmptyList) {
  ExpectError(ParseLengthList("").status(), StatusCode::kInvalidArgument, "''");
}

TEST(ParseLengthList, RejectsAnEmptyItem) {
  ExpectError(ParseLengthList("1,,2").status(), StatusCode::kInvalidArgument, "1,,2");
}

TEST(ParseLengthList, RejectsATrailingComma) {
  ExpectError(ParseLengthList("1,2,").status(), StatusCode::kInvalidArgument, "1,2,");
}

TEST(ParseLengthList, RejectsANonNumberAndNamesIt) {
  ExpectError(ParseLengthList("1,x").status(), StatusCode::kInvalidArgument, "'x'");
}

TEST(ParseLengthList, RejectsTrailingGarbageAfterANumber) {
  ExpectError(ParseLengthList("12ab").status(), StatusCode::kInvalidArgument, "12ab");
  ExpectError(ParseLengthList("1.5").status(), StatusCode::kInvalidArgument, "1.5");
}

TEST(ParseLengthList, RejectsZero) {
  ExpectError(ParseLengthList("0").status(), StatusCode::kInvalidArgument, "0");
  ExpectError(ParseLengthList("5,0").status(), StatusCode::kInvalidArgument, "length 0");
}

TEST(ParseLengthList, RejectsANegativeLength) {
  ExpectError(ParseLengthList("-3").status(), StatusCode::kInvalidArgument, "-3");
}

TEST(ParseLengthList, RejectsALengthAboveTheMaximum) {
  ExpectError(ParseLengthList(std::to_string(kMaxSequenceLength + 1)).status(),
              StatusCode::kInvalidArgument, std::to_string(kMaxSequenceLength + 1));
}

TEST(ParseLengthList, RejectsANumberThatOverflowsInt64) {
  ExpectError(ParseLengthList("99999999999999999999999").status(), StatusCode::kInvalidArgument,
              "99999999999999999999999");
}

// ---------------------------------------------------------------------------------------------
// ReadLengthsFile

TEST(ReadLengthsFile, ReadsOneLengthPerLine) {
  const TempFile file("4096\n1000\n17\n");
  const Result<std::vector<int64_t>> lengths = ReadLengthsFile(file.path());
  ASSERT_TRUE(lengths.ok()) << lengths.status().ToString();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{4096, 1000, 17}));
}

TEST(ReadLengthsFile, IgnoresCommentsBlankLinesAndCarriageReturns) {
  const TempFile file(
      "# lengths of a test batch\r\n"
      "\r\n"
      "4096\r\n"
      "   \n"
      "  1000   # a comment after a length\r\n"
      "\t# an indented comment 12\n"
      "\n"
      "17");  // the last line has no newline
  const Result<std::vector<int64_t>> lengths = ReadLengthsFile(file.path());
  ASSERT_TRUE(lengths.ok()) << lengths.status().ToString();
  EXPECT_EQ(*lengths, (std::vector<int64_t>{4096, 1000, 17}));
}

TEST(ReadLengthsFile, NamesTheLineOfABadLength) {
  const TempFile file("# header\n100\n\n12x\n5\n");
  const Status status = ReadLengthsFile(file.path()).status();
  ExpectError(status, StatusCode::kInvalidArgument, "line 4");
  ExpectError(status, StatusCode::kInvalidArgument, "12x");
  ExpectError(status, StatusCode::kInvalidArgument, file.path());
}

// A binary file read by mistake: the message quotes a short, printable excerpt of the line, never
// its control bytes or all of its megabytes.
TEST(ReadLengthsFile, QuotesABinaryLineAsAShortPrintableExcerpt) {
  std::string line("12\0\x01\x1b[2J", 8);
  line += std::string(100000, 'x');
  const TempFile file("7\n" + line + "\n");
  const Status status = ReadLengthsFile(file.path()).status();
  ExpectError(status, StatusCode::kInvalidArgument, "line 2");
  ExpectError(status, StatusCode::kInvalidArgument, "(100008 bytes)");
  EXPECT_LT(status.message().size(), 400u) << status.message();
  for (char c : status.message()) {
    EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
        << "control byte " << static_cast<int>(c) << " in the message";
  }
}

TEST(ReadLengthsFile, NamesTheLineOfAZeroLength) {
  const TempFile file("1\r\n2\r\n0\r\n");
  ExpectError(ReadLengthsFile(file.path()).status(), StatusCode::kInvalidArgument, "line 3");
}

TEST(ReadLengthsFile, RejectsTwoLengthsOnOneLine) {
  const TempFile file("1 2\n");
  ExpectError(ReadLengthsFile(file.path()).status(), StatusCode::kInvalidArgument, "line 1");
}

TEST(ReadLengthsFile, RejectsAFileWithoutLengths) {
  const TempFile file("# nothing here\n\n");
  ExpectError(ReadLengthsFile(file.path()).status(), StatusCode::kInvalidArgument, file.path());
}

TEST(ReadLengthsFile, ReportsAMissingFileAsNotFound) {
  const std::string path = ::testing::TempDir() + "dcp_no_such_lengths_file.txt";
  ExpectError(ReadLengthsFile(path).status(), StatusCode::kNotFound, path);
}

// ---------------------------------------------------------------------------------------------
// ReadMegatronIndex

// Builds a Megatron-LM MMapIndexedDataset index file, little-endian, field by field.
class IndexWriter {
 public:
  IndexWriter& Bytes(const std::string& bytes) {
    data_ += bytes;
    return *this;
  }
  IndexWriter& U8(uint8_t v) { return Le(v, 1); }
  IndexWriter& U64(uint64_t v) { return Le(v, 8); }
  IndexWriter& I32(int32_t v) { return Le(static_cast<uint32_t>(v), 4); }
  IndexWriter& I64(int64_t v) { return Le(static_cast<uint64_t>(v), 8); }
  const std::string& data() const { return data_; }

 private:
  IndexWriter& Le(uint64_t v, int bytes) {
    for (int b = 0; b < bytes; ++b) data_.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
    return *this;
  }
  std::string data_;
};

const std::string kMagic("MMIDIDX\0\0", 9);

// A well-formed index of the given lengths: header, int32 lengths, int64 byte pointers and
// int64 document indices (one document per sequence, plus the leading 0, as Megatron writes).
std::string WellFormedIndex(const std::vector<int32_t>& lengths, uint8_t dtype_code = 4) {
  IndexWriter w;
  w.Bytes(kMagic).U64(1).U8(dtype_code).U64(lengths.size()).U64(lengths.size() + 1);
  for (int32_t len : lengths) w.I32(len);
  int64_t pointer = 0;
  for (int32_t len : lengths) {
    w.I64(pointer);
    pointer += int64_t{len} * 4;
  }
  for (size_t d = 0; d <= lengths.size(); ++d) w.I64(static_cast<int64_t>(d));
  return w.data();
}

// A header followed by `payload_bytes` zero bytes.
std::string Header(uint64_t version, uint8_t dtype, uint64_t sequences, uint64_t documents) {
  IndexWriter w;
  w.Bytes(kMagic).U64(version).U8(dtype).U64(sequences).U64(documents);
  return w.data();
}

TEST(ReadMegatronIndex, ReadsTheSequenceLengths) {
  const std::vector<int32_t> lengths = {5, 100000, 1, 2048, int32_t{1} << 30};
  const TempFile file(WellFormedIndex(lengths));
  const Result<MegatronIndexLengths> read = ReadMegatronIndex(file.path());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->lengths, (std::vector<int64_t>{5, 100000, 1, 2048, int64_t{1} << 30}));
  EXPECT_EQ(read->empty_sequences, 0);
}

// Megatron-LM writes a sequence of length 0 for an empty document (issue 18: refused as corrupt).
TEST(ReadMegatronIndex, SkipsEmptySequencesAndCountsThem) {
  const TempFile file(WellFormedIndex({0, 5, 0, 0, 7, 0}));
  const Result<MegatronIndexLengths> read = ReadMegatronIndex(file.path());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->lengths, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(read->empty_sequences, 4);
}

TEST(ReadMegatronIndex, RejectsAnIndexWithoutANonEmptySequence) {
  for (const std::vector<int32_t>& lengths : {std::vector<int32_t>{}, std::vector<int32_t>{0, 0}}) {
    SCOPED_TRACE(lengths.size());
    const TempFile file(WellFormedIndex(lengths));
    ExpectError(ReadMegatronIndex(file.path()).status(), StatusCode::kInvalidArgument,
                "holds no sequence of length >= 1");
  }
}

// The legacy IndexedDataset index (--dataset-impl lazy or cached) of Megatron-LM, as its
// IndexedDatasetBuilder writes it: magic, version 1, dtype code, element size, sequence count,
// size count, document count, then the offset arrays.
TEST(ReadMegatronIndex, NamesTheLegacyFormatAndHowToConvertIt) {
  IndexWriter w;
  w.Bytes(std::string("TNTIDX\0\0", 8)).U64(1).U64(4).U64(4).U64(2).U64(2).U64(2);
  for (int64_t v : {0, 1, 2}) w.I64(v);   // dim offsets
  for (int64_t v : {0, 5, 12}) w.I64(v);  // data offsets
  for (int64_t v : {5, 7}) w.I64(v);      // sizes
  for (int64_t v : {0, 2}) w.I64(v);      // document indices
  const TempFile file(w.data());
  const Status status = ReadMegatronIndex(file.path()).status();
  ExpectError(status, StatusCode::kUnsupported, "legacy indexed dataset format (TNTIDX");
  ExpectError(status, StatusCode::kUnsupported, "--dataset-impl mmap");
  ExpectError(status, StatusCode::kUnsupported, file.path());
}

TEST(ReadMegatronIndex, ReadsEveryTokenDtypeCode) {
  // Megatron's codes: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16.
  for (uint8_t code = 1; code <= 8; ++code) {
    SCOPED_TRACE(static_cast<int>(code));
    const TempFile file(WellFormedIndex({7, 8}, code));
    const Result<MegatronIndexLengths> read = ReadMegatronIndex(file.path());
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    EXPECT_EQ(read->lengths, (std::vector<int64_t>{7, 8}));
  }
}

TEST(ReadMegatronIndex, ReadsAnIndexWithoutDocumentIndices) {
  IndexWriter w;
  w.Bytes(kMagic).U64(1).U8(4).U64(2).U64(0).I32(3).I32(4).I64(0).I64(12);
  const TempFile file(w.data());
  const Result<MegatronIndexLengths> read = ReadMegatronIndex(file.path());
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->lengths, (std::vector<int64_t>{3, 4}));
}

TEST(ReadMegatronIndex, ReportsAMissingFileAsNotFound) {
  const std::string path = ::testing::TempDir() + "dcp_no_such_index.idx";
  ExpectError(ReadMegatronIndex(path).status(), StatusCode::kNotFound, path);
}

TEST(ReadMegatronIndex, RejectsABadMagic) {
  std::string data = WellFormedIndex({10, 20});
  data[0] = 'X';
  const TempFile file(data);
  ExpectError(ReadMegatronIndex(file.path()).status(), StatusCode::kCorrupt, file.path());
}

TEST(ReadMegatronIndex, RejectsAMagicWithoutItsTwoNulBytes) {
  std::string data = WellFormedIndex({10, 20});
  data[8] = '1';
  const TempFile file(data);
  EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kCorrupt);
}

TEST(ReadMegatronIndex, RejectsAnEmptyFile) {
  const TempFile file("");
  EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kCorrupt);
}

TEST(ReadMegatronIndex, RefusesVersion2AsUnsupported) {
  std::string data = WellFormedIndex({10, 20});
  data[9] = 2;  // the low byte of the little-endian version
  const TempFile file(data);
  ExpectError(ReadMegatronIndex(file.path()).status(), StatusCode::kUnsupported,
              "version 2 is not supported (dcp reads version 1");
}

TEST(ReadMegatronIndex, RefusesAVersionWithHighBitsSet) {
  IndexWriter w;
  w.Bytes(kMagic).U64((uint64_t{1} << 32) | 1).U8(4).U64(1).U64(0).I32(10).I64(0);
  const TempFile file(w.data());
  EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kUnsupported);
}

TEST(ReadMegatronIndex, RejectsAnUnknownDtypeCode) {
  for (uint8_t code : {uint8_t{0}, uint8_t{9}, uint8_t{255}}) {
    SCOPED_TRACE(static_cast<int>(code));
    const TempFile file(WellFormedIndex({10, 20}, code));
    EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kCorrupt);
  }
}

TEST(ReadMegatronIndex, RejectsEveryTruncationOfTheHeader) {
  const std::string data = WellFormedIndex({10, 20});
  constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
  for (size_t size = 0; size < kHeaderBytes; ++size) {
    SCOPED_TRACE(size);
    const TempFile file(data.substr(0, size));
    EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kCorrupt);
  }
}

TEST(ReadMegatronIndex, RejectsEveryTruncationOfTheArrays) {
  const std::string data = WellFormedIndex({10, 20, 30});
  constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;
  ASSERT_EQ(data.size(), kHeaderBytes + 3 * 4 + 3 * 8 + 4 * 8);
  for (size_t size = kHeaderBytes; size < data.size(); ++size) {
    SCOPED_TRACE(size);
    const TempFile file(data.substr(0, size));
    EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kCorrupt);
  }
}

TEST(ReadMegatronIndex, RejectsHugeSequenceCountsWithoutAllocating) {
  for (uint64_t count :
       {uint64_t{1} << 40, uint64_t{1} << 62, uint64_t{1} << 63,
        std::numeric_limits<uint64_t>::max(), std::numeric_limits<uint64_t>::max() / 12 + 1}) {
    SCOPED_TRACE(count);
    const TempFile file(Header(1, 4, count, 1) + std::string(64, '\1'));
    EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kCorrupt);
  }
}

TEST(ReadMegatronIndex, RejectsHugeDocumentCounts) {
  for (uint64_t count : {uint64_t{1} << 40, uint64_t{1} << 61, uint64_t{1} << 63,
                         std::numeric_limits<uint64_t>::max()}) {
    SCOPED_TRACE(count);
    IndexWriter w;
    w.Bytes(Header(1, 4, 2, count)).I32(10).I32(20).I64(0).I64(40).I64(0).I64(1).I64(2);
    const TempFile file(w.data());
    EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kCorrupt);
  }
}

TEST(ReadMegatronIndex, RejectsANegativeLengthAndNamesTheSequence) {
  const TempFile file(WellFormedIndex({10, -5, 30}));
  const Status status = ReadMegatronIndex(file.path()).status();
  ExpectError(status, StatusCode::kCorrupt, "sequence 1");
  ExpectError(status, StatusCode::kCorrupt, "-5");
}

TEST(ReadMegatronIndex, RejectsTheMostNegativeLength) {
  const TempFile file(WellFormedIndex({std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kCorrupt);
}

TEST(ReadMegatronIndex, RejectsALengthFileThatIsNotAnIndex) {
  const TempFile file("4096\n1000\n17\n");
  EXPECT_EQ(ReadMegatronIndex(file.path()).status().code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace dcp
