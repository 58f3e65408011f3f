// SPDX-License-Identifier: Apache-2.0
// Parsing and printing of mask specs; the grammar is in docs/mask_spec.md.
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "dcp/mask.h"
#include "util/excerpt.h"
#include "util/json.h"

namespace dcp {
namespace {

using internal::Excerpt;  // user text in messages: long specs are quoted by an excerpt

struct FamilyInfo {
  MaskFamily family;
  std::string_view name;
  std::vector<std::string_view> keys;  // accepted parameters, in canonical order
};

const std::vector<FamilyInfo>& Families() {
  static const std::vector<FamilyInfo> kFamilies = {
      {MaskFamily::kCausal, "causal", {}},
      {MaskFamily::kFull, "full", {}},
      {MaskFamily::kSlidingWindow, "sliding-window", {"window"}},
      {MaskFamily::kLambda, "lambda", {"sink", "window"}},
      {MaskFamily::kCausalBlockwise, "causal-blockwise", {"block", "local"}},
      {MaskFamily::kSharedQuestion, "shared-question", {"question", "answers"}},
      {MaskFamily::kDocuments, "documents", {"lengths", "count"}},
      {MaskFamily::kModality, "modality", {"images", "text", "image"}},
      {MaskFamily::kExplicit, "explicit", {}},
  };
  return kFamilies;
}

std::string FamilyList() {
  std::string out;
  for (const FamilyInfo& f : Families()) {
    if (f.family == MaskFamily::kExplicit) continue;
    if (!out.empty()) out += ", ";
    out += f.name;
  }
  return out;
}

// Parses the whole of `text` as an integer in [min, max].
Result<int64_t> ParseInt(std::string_view key, std::string_view text, int64_t min, int64_t max) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return Status::InvalidArgument(fmt::format("{}='{}' is not an integer", key, Excerpt(text)));
  }
  if (value < min || value > max) {
    return Status::InvalidArgument(
        fmt::format("{}={} is out of range [{}, {}]", key, value, min, max));
  }
  return value;
}

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(sep, start);
    parts.push_back(text.substr(start, pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

// Each document, image span or slice of a list becomes at least one slice of the mask.
Status CheckListSize(std::string_view list, size_t size) {
  if (size <= static_cast<size_t>(kMaxMaskSlices)) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{} lists more than {} elements, the limit of slices per mask", list, kMaxMaskSlices));
}

Status SetParameter(MaskSpec& spec, std::string_view key, std::string_view value) {
  constexpr int64_t kMax = kMaxSequenceLength;
  if (key == "window") {
    DCP_ASSIGN_OR_RETURN(spec.window, ParseInt(key, value, 1, kMax));
  } else if (key == "sink") {
    DCP_ASSIGN_OR_RETURN(spec.sink, ParseInt(key, value, 0, kMax));
  } else if (key == "block") {
    DCP_ASSIGN_OR_RETURN(spec.block, ParseInt(key, value, 1, kMax));
  } else if (key == "local") {
    DCP_ASSIGN_OR_RETURN(spec.local, ParseInt(key, value, 0, kMax));
  } else if (key == "answers") {
    DCP_ASSIGN_OR_RETURN(spec.answers, ParseInt(key, value, 1, kMax));
  } else if (key == "question") {
    double q = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), q);
    if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(q)) {
      return Status::InvalidArgument(fmt::format("question='{}' is not a number", Excerpt(value)));
    }
    if (q < 0 || q >= 1) {
      return Status::InvalidArgument(fmt::format("question={} is out of range [0, 1)", q));
    }
    spec.question = q;
  } else if (key == "lengths") {
    for (std::string_view part : Split(value, '/')) {
      DCP_RETURN_IF_ERROR(CheckListSize("lengths", spec.document_lengths.size() + 1));
      DCP_ASSIGN_OR_RETURN(int64_t len, ParseInt("lengths", part, 1, kMax));
      spec.document_lengths.push_back(len);
    }
  } else if (key == "count") {
    DCP_ASSIGN_OR_RETURN(spec.document_count, ParseInt(key, value, 1, kMax));
  } else if (key == "text") {
    DCP_ASSIGN_OR_RETURN(spec.text_tokens, ParseInt(key, value, 0, kMax));
  } else if (key == "image") {
    DCP_ASSIGN_OR_RETURN(spec.image_tokens, ParseInt(key, value, 1, kMax));
  } else if (key == "images") {
    for (std::string_view part : Split(value, '/')) {
      DCP_RETURN_IF_ERROR(CheckListSize("images", spec.image_spans.size() + 1));
      const std::vector<std::string_view> ends = Split(part, '-');
      if (ends.size() != 2) {
        return Status::InvalidArgument(
            fmt::format("images: span '{}' is not BEGIN-END", Excerpt(part)));
      }
      DCP_ASSIGN_OR_RETURN(int64_t begin, ParseInt("image begin", ends[0], 0, kMax));
      DCP_ASSIGN_OR_RETURN(int64_t end, ParseInt("image end", ends[1], 0, kMax));
      if (end <= begin) {
        return Status::InvalidArgument(fmt::format("images: span '{}' is empty", Excerpt(part)));
      }
      if (!spec.image_spans.empty() && begin < spec.image_spans.back().second) {
        return Status::InvalidArgument(fmt::format(
            "images: span '{}' overlaps or precedes the span before it", Excerpt(part)));
      }
      spec.image_spans.emplace_back(begin, end);
    }
  }
  return Status::Ok();
}

// Rules between parameters of one family.
Status CheckCombination(const MaskSpec& spec, bool has_text) {
  if (spec.family == MaskFamily::kDocuments &&
      spec.document_lengths.empty() == (spec.document_count == 0)) {
    return Status::InvalidArgument("documents needs exactly one of lengths=A/B/... or count=N");
  }
  if (spec.family == MaskFamily::kModality) {
    const bool periodic = spec.image_tokens > 0 || has_text;
    if (spec.image_spans.empty() == !periodic) {
      return Status::InvalidArgument(
          "modality needs exactly one of images=B-E/B-E/... or image=N[,text=M]");
    }
    if (periodic && spec.image_tokens == 0) {
      return Status::InvalidArgument("modality: text=M needs image=N too");
    }
  }
  return Status::Ok();
}

Result<MaskSpec> ParseText(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const FamilyInfo* info = nullptr;
  for (const FamilyInfo& f : Families()) {
    if (f.name == name && f.family != MaskFamily::kExplicit) info = &f;
  }
  if (info == nullptr) {
    return Status::InvalidArgument(fmt::format(
        "unknown mask family '{}' (known: {}, or a JSON object)", Excerpt(name), FamilyList()));
  }
  MaskSpec spec;
  spec.family = info->family;
  bool has_text = false;
  if (colon != std::string_view::npos) {
    std::map<std::string_view, bool> seen;
    for (std::string_view item : Split(text.substr(colon + 1), ',')) {
      const size_t eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0) {
        return Status::InvalidArgument(
            fmt::format("parameter '{}' is not key=value", Excerpt(item)));
      }
      const std::string_view key = item.substr(0, eq);
      if (std::find(info->keys.begin(), info->keys.end(), key) == info->keys.end()) {
        return Status::InvalidArgument(
            fmt::format("unknown parameter '{}' for mask family '{}'", Excerpt(key), name));
      }
      if (seen[key]) {
        return Status::InvalidArgument(fmt::format("parameter '{}' given twice", Excerpt(key)));
      }
      seen[key] = true;
      has_text = has_text || key == "text";
      DCP_RETURN_IF_ERROR(SetParameter(spec, key, item.substr(eq + 1)));
    }
  }
  DCP_RETURN_IF_ERROR(CheckCombination(spec, has_text));
  return spec;
}

Result<AffineColumn> ParseColumn(const nlohmann::json& j, std::string_view what) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_integer() || !j[1].is_number_integer()) {
    return Status::InvalidArgument(fmt::format("{} must be [base, slope] with integers, got {}",
                                               what, internal::JsonExcerpt(j)));
  }
  for (const nlohmann::json& value : j) {
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::InvalidArgument(fmt::format("{}: {} is out of range", what, value.dump()));
    }
  }
  return AffineColumn{.base = j[0].get<int64_t>(), .slope = j[1].get<int64_t>()};
}

Result<MaskSpec> ParseJson(std::string_view text) {
  DCP_ASSIGN_OR_RETURN(const nlohmann::json j, internal::ParseJson(text, "mask JSON"));
  if (!j.is_object() || !j.contains("slices") || !j["slices"].is_array()) {
    return Status::InvalidArgument("mask JSON must be an object with a \"slices\" array");
  }
  DCP_RETURN_IF_ERROR(CheckListSize("mask JSON \"slices\"", j["slices"].size()));
  for (const auto& [key, _] : j.items()) {
    if (key != "slices")
      return Status::InvalidArgument(fmt::format("mask JSON: unknown key '{}'", Excerpt(key)));
  }
  MaskSpec spec;
  spec.family = MaskFamily::kExplicit;
  for (size_t i = 0; i < j["slices"].size(); ++i) {
    const nlohmann::json& s = j["slices"][i];
    const std::string where = fmt::format("slice {}", i);
    if (!s.is_object() || s.size() != 3 || !s.contains("rows") || !s.contains("lo") ||
        !s.contains("hi")) {
      return Status::InvalidArgument(
          fmt::format("{} must be {{\"rows\": [b, e], \"lo\": [base, slope], \"hi\": [base, "
                      "slope]}}, got {}",
                      where, internal::JsonExcerpt(s)));
    }
    DCP_ASSIGN_OR_RETURN(AffineColumn rows, ParseColumn(s["rows"], where + " rows"));
    DCP_ASSIGN_OR_RETURN(AffineColumn lo, ParseColumn(s["lo"], where + " lo"));
    DCP_ASSIGN_OR_RETURN(AffineColumn hi, ParseColumn(s["hi"], where + " hi"));
    for (const auto& [name, col] : {std::pair{"lo", lo}, std::pair{"hi", hi}}) {
      if (col.slope != 0 && col.slope != 1) {
        return Status::InvalidArgument(
            fmt::format("{}: {} slope {} is not 0 or 1", where, name, col.slope));
      }
    }
    if (rows.base < 0 || rows.slope < rows.base) {
      return Status::InvalidArgument(
          fmt::format("{}: rows [{}, {}) are not a range of rows", where, rows.base, rows.slope));
    }
    spec.slices.push_back(Slice{rows.base, rows.slope, lo, hi});
  }
  return spec;
}

}  // namespace

std::string_view ToString(MaskFamily family) {
  for (const FamilyInfo& f : Families()) {
    if (f.family == family) return f.name;
  }
  return "unknown";
}

Result<MaskSpec> MaskSpec::Parse(std::string_view text) {
  Result<MaskSpec> spec = !text.empty() && text.front() == '{' ? ParseJson(text) : ParseText(text);
  if (!spec.ok()) {
    return spec.status().WithContext(fmt::format("mask '{}'", Excerpt(text)));
  }
  return spec;
}

std::string MaskSpec::ToString() const {
  const std::string name(dcp::ToString(family));
  switch (family) {
    case MaskFamily::kCausal:
    case MaskFamily::kFull:
      return name;
    case MaskFamily::kSlidingWindow:
      return fmt::format("{}:window={}", name, window);
    case MaskFamily::kLambda:
      return fmt::format("{}:sink={},window={}", name, sink, window);
    case MaskFamily::kCausalBlockwise:
      return fmt::format("{}:block={},local={}", name, block, local);
    case MaskFamily::kSharedQuestion:
      return fmt::format("{}:question={},answers={}", name, question, answers);
    case MaskFamily::kDocuments:
      if (document_count > 0) return fmt::format("{}:count={}", name, document_count);
      return fmt::format("{}:lengths={}", name, fmt::join(document_lengths, "/"));
    case MaskFamily::kModality: {
      if (image_tokens > 0)
        return fmt::format("{}:image={},text={}", name, image_tokens, text_tokens);
      std::vector<std::string> spans;
      for (const auto& [b, e] : image_spans) spans.push_back(fmt::format("{}-{}", b, e));
      return fmt::format("{}:images={}", name, fmt::join(spans, "/"));
    }
    case MaskFamily::kExplicit: {
      nlohmann::json list = nlohmann::json::array();
      for (const Slice& s : slices) {
        list.push_back({{"rows", {s.row_begin, s.row_end}},
                        {"lo", {s.lo.base, s.lo.slope}},
                        {"hi", {s.hi.base, s.hi.slope}}});
      }
      return nlohmann::json{{"slices", list}}.dump();
    }
  }
  return name;
}

}  // namespace dcp
