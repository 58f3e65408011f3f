// SPDX-License-Identifier: Apache-2.0
// The built-in mask families as raw slices; Mask::FromSlices normalizes them. Definitions follow
// the DCP paper's masks (see docs/mask_spec.md); raw slices may overlap, normalization merges them.
#include <algorithm>
#include <cmath>

#include "dcp/mask.h"
#include "util/excerpt.h"

namespace dcp {
namespace {

constexpr AffineColumn Col(int64_t base) { return {.base = base, .slope = 0}; }
constexpr AffineColumn RowPlus(int64_t offset) { return {.base = offset, .slope = 1}; }

// Periodic families build slices in proportion to the sequence length or to a number in the spec;
// they check the count before building any, so no spec allocates more than kMaxMaskSlices slices
// whatever its numbers. (Listed lengths, spans and slices are bounded when parsed.)
Status CheckSliceCount(std::string_view family, int64_t length, int64_t slices) {
  if (slices <= kMaxMaskSlices) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("{}: a sequence of {} tokens needs {} slices, more than the limit of {} per mask",
                  family, length, slices, kMaxMaskSlices));
}

// Rows [r0, r1) attend causally to [first, i].
Slice CausalFrom(int64_t r0, int64_t r1, int64_t first) {
  return Slice{r0, r1, Col(first), RowPlus(1)};
}

std::vector<Slice> SlidingWindow(int64_t length, int64_t window) {
  return {Slice{0, length, RowPlus(1 - window), RowPlus(1)}};
}

std::vector<Slice> Lambda(int64_t length, int64_t sink, int64_t window) {
  std::vector<Slice> s = SlidingWindow(length, window);
  const int64_t n_sink = std::min(sink, length);
  if (n_sink > 0) {
    s.push_back(CausalFrom(0, n_sink, 0));                    // rows inside the sink
    s.push_back(Slice{n_sink, length, Col(0), Col(n_sink)});  // later rows see the sink
  }
  return s;
}

// Block b = i / block. b == 0: causal. b == last (of more than one): everything up to i.
// Otherwise: the first block plus [max(block, i - local * block), i].
std::vector<Slice> CausalBlockwise(int64_t length, int64_t block, int64_t local) {
  const int64_t n_blocks = (length + block - 1) / block;
  if (n_blocks <= 2) return {CausalFrom(0, length, 0)};
  const int64_t last_begin = (n_blocks - 1) * block;
  const int64_t window_moves =
      std::min(last_begin, block + local * block);  // i - local*block >= block
  std::vector<Slice> s = {CausalFrom(0, block, 0), Slice{block, last_begin, Col(0), Col(block)},
                          CausalFrom(block, window_moves, block),
                          CausalFrom(last_begin, length, 0)};
  if (window_moves < last_begin) {
    s.push_back(Slice{window_moves, last_begin, RowPlus(-local * block), RowPlus(1)});
  }
  return s;
}

// q = floor(question * length) question tokens, causal. The rest is split into `answers` answers
// of (length - q) / answers tokens, the last one taking the remainder; each answer row sees the
// question and its own answer causally.
Result<std::vector<Slice>> SharedQuestion(int64_t length, double question, int64_t answers) {
  const auto q = static_cast<int64_t>(std::floor(question * static_cast<double>(length)));
  const int64_t answer_len = (length - q) / answers;
  if (answer_len > 0) {
    DCP_RETURN_IF_ERROR(CheckSliceCount("shared-question", length, 1 + 2 * answers));
  }
  std::vector<Slice> s;
  if (q > 0) s.push_back(CausalFrom(0, q, 0));
  // With fewer answer tokens than answers, all answers but the last are empty: skip them.
  for (int64_t a = answer_len == 0 ? answers - 1 : 0; a < answers; ++a) {
    const int64_t begin = q + a * answer_len;
    const int64_t end = a + 1 == answers ? length : begin + answer_len;
    if (begin == end) continue;
    if (q > 0) s.push_back(Slice{begin, end, Col(0), Col(q)});
    s.push_back(CausalFrom(begin, end, begin));
  }
  return s;
}

Result<std::vector<Slice>> Documents(int64_t length, const MaskSpec& spec) {
  std::vector<int64_t> lengths = spec.document_lengths;
  if (spec.document_count > 0) {
    if (spec.document_count > length) {
      return Status::InvalidArgument(
          fmt::format("documents: count={} is more than the {} tokens of the sequence",
                      spec.document_count, length));
    }
    DCP_RETURN_IF_ERROR(CheckSliceCount("documents", length, spec.document_count));
    for (int64_t d = 0; d < spec.document_count; ++d) {
      lengths.push_back((d + 1) * length / spec.document_count - d * length / spec.document_count);
    }
  }
  std::vector<Slice> s;
  s.reserve(lengths.size() + 1);
  int64_t begin = 0;
  for (int64_t len : lengths) {
    if (begin + len > length) {
      return Status::InvalidArgument(
          fmt::format("documents: lengths sum to more than the {} tokens of the sequence", length));
    }
    s.push_back(CausalFrom(begin, begin + len, begin));
    begin += len;
  }
  if (begin < length) s.push_back(CausalFrom(begin, length, begin));  // the remainder document
  return s;
}

// Text rows are causal; an image row sees everything before its image and the whole image.
Result<std::vector<Slice>> Modality(int64_t length, const MaskSpec& spec) {
  std::vector<std::pair<int64_t, int64_t>> spans = spec.image_spans;
  if (spec.image_tokens > 0 && spec.text_tokens < length) {
    // Per image, the text before it and the image, then the text after the last one.
    const int64_t period = spec.text_tokens + spec.image_tokens;
    const int64_t images = (length - spec.text_tokens + period - 1) / period;
    DCP_RETURN_IF_ERROR(CheckSliceCount("modality", length, 2 * images + 1));
    spans.reserve(static_cast<size_t>(images));
    for (int64_t b = spec.text_tokens; b < length; b += spec.text_tokens + spec.image_tokens) {
      spans.emplace_back(b, std::min(length, b + spec.image_tokens));
    }
  }
  std::vector<Slice> s;
  s.reserve(2 * spans.size() + 1);
  int64_t text_begin = 0;
  for (const auto& [begin, end] : spans) {
    if (end > length) {
      return Status::InvalidArgument(
          fmt::format("modality: image span {}-{} ends past the {} tokens of the sequence", begin,
                      end, length));
    }
    if (text_begin < begin) s.push_back(CausalFrom(text_begin, begin, 0));
    s.push_back(Slice{begin, end, Col(0), Col(end)});
    text_begin = end;
  }
  if (text_begin < length) s.push_back(CausalFrom(text_begin, length, 0));
  return s;
}

Result<std::vector<Slice>> RawSlices(const MaskSpec& spec, int64_t length) {
  switch (spec.family) {
    case MaskFamily::kCausal:
      return std::vector<Slice>{CausalFrom(0, length, 0)};
    case MaskFamily::kFull:
      return std::vector<Slice>{Slice{0, length, Col(0), Col(length)}};
    case MaskFamily::kSlidingWindow:
      return SlidingWindow(length, spec.window);
    case MaskFamily::kLambda:
      return Lambda(length, spec.sink, spec.window);
    case MaskFamily::kCausalBlockwise:
      return CausalBlockwise(length, spec.block, spec.local);
    case MaskFamily::kSharedQuestion:
      return SharedQuestion(length, spec.question, spec.answers);
    case MaskFamily::kDocuments:
      return Documents(length, spec);
    case MaskFamily::kModality:
      return Modality(length, spec);
    case MaskFamily::kExplicit:
      return spec.slices;
  }
  return Status::Internal("unknown mask family");
}

}  // namespace

Result<Mask> MaskSpec::Build(int64_t length) const {
  const std::string context = fmt::format(
      "mask '{}'", family == MaskFamily::kExplicit ? "explicit" : internal::Excerpt(ToString()));
  if (length < 1 || length > kMaxSequenceLength) {
    return Status::InvalidArgument(fmt::format("{}: sequence length {} is not in [1, {}]", context,
                                               length, kMaxSequenceLength));
  }
  Result<std::vector<Slice>> raw = RawSlices(*this, length);
  if (!raw.ok()) return raw.status().WithContext(context);
  Result<Mask> mask = Mask::FromSlices(length, *raw);
  if (!mask.ok()) return mask.status().WithContext(context);
  return mask;
}

}  // namespace dcp
