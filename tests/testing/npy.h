// SPDX-License-Identifier: Apache-2.0
// Reads back what `dcp run --dump DIR` writes (float32 .npy files and batch.json), independently
// of the CLI's writer: the header is parsed as NumPy's format 1.0 defines it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dcp/batch.h"
#include "dcp/runtime.h"

namespace dcp::testing {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// A little-endian float32, C-order .npy file (format version 1.0). Fails the test otherwise.
inline NpyArray ReadNpy(const std::string& path) {
  NpyArray array;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::string magic(8, '\0');
  in.read(magic.data(), 8);
  EXPECT_EQ(magic, std::string("\x93NUMPY\x01\x00", 8)) << path;
  unsigned char length[2] = {};
  in.read(reinterpret_cast<char*>(length), 2);
  std::string header(static_cast<size_t>(length[0] | length[1] << 8), '\0');
  in.read(header.data(), static_cast<std::streamsize>(header.size()));
  EXPECT_EQ((10 + header.size()) % 64, 0u) << path << ": header not padded to 64 bytes";
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
  const size_t open = header.find("'shape': (") + 10, close = header.find(')', open);
  EXPECT_NE(close, std::string::npos) << header;
  int64_t elements = 1;
  for (size_t at = open; at < close;) {
    size_t used = 0;
    array.shape.push_back(std::stoll(header.substr(at, close - at), &used));
    elements *= array.shape.back();
    at = header.find_first_not_of(", ", at + used);
  }
  array.data.resize(static_cast<size_t>(elements));
  in.read(reinterpret_cast<char*>(array.data.data()),
          static_cast<std::streamsize>(array.data.size() * sizeof(float)));
  EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(array.data.size() * sizeof(float))) << path;
  EXPECT_EQ(in.peek(), std::char_traits<char>::eof()) << path << ": bytes after the data";
  return array;
}

// The batch of a dump directory (batch.json), its tensors (the .npy files), dtype and scale.
struct Dumped {
  Batch batch;
  BatchTensors tensors;
  double softmax_scale = 0;
};

inline Dumped ReadDump(const std::string& dir) {
  std::ifstream meta(dir + "/batch.json");
  const nlohmann::json j = nlohmann::json::parse(meta);
  std::vector<MaskSpec> masks;
  for (const auto& m : j["masks"]) masks.push_back(*MaskSpec::Parse(m.get<std::string>()));
  const DType dtype = j["dtype"].get<std::string>() == "fp32" ? DType::kFloat32 : DType::kBFloat16;
  const AttentionShape shape{.heads = j["heads"].get<int64_t>(),
                             .kv_heads = j["kv_heads"].get<int64_t>(),
                             .head_dim = j["head_dim"].get<int64_t>(),
                             .dtype = dtype};
  Result<Batch> batch = Batch::Create(j["seqlens"].get<std::vector<int64_t>>(), masks, shape);
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  Dumped d{.batch = *std::move(batch), .tensors = {}, .softmax_scale = j["softmax_scale"]};
  BatchTensors& t = d.tensors;
  for (const auto& [name, tensor] :
       {std::pair{"q", &t.q}, std::pair{"k", &t.k}, std::pair{"v", &t.v}, std::pair{"do", &t.d_o},
        std::pair{"o", &t.o}, std::pair{"lse", &t.lse}, std::pair{"dq", &t.dq},
        std::pair{"dk", &t.dk}, std::pair{"dv", &t.dv}}) {
    *tensor = ReadNpy(dir + "/" + name + ".npy").data;
  }
  return d;
}

}  // namespace dcp::testing
