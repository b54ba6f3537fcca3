// Named table-size and multi-hot presets for the Criteo workloads, usable in configs as
// `model.table_rows: criteo_kaggle` or `data.synthetic.pooling: mlperf_multi_hot`.
// Numbers copied from ../shared/data/criteo/CARDINALITIES.md, which cites, for each list:
//   kCriteoKaggleTableRows     section 1: facebookresearch/dlrm @ 090956ee, tools/visualize.py
//                              (kaggle, ln_emb); sum 33,762,577 rows.
//   kCriteo1TbMlperfTableRows  section 2: mlcommons/training @ aa344c7f,
//                              recommendation_v2/torchrec_dlrm/README.MD
//                              (--num_embeddings_per_feature; 1-hot ids capped at 40M), and
//                              pytorch/torchrec @ a48cef79 criteo_constant.py; sum 204,184,588.
//   kMlperfMultiHotSizes       section 2: mlcommons/training README.MD (--multi_hot_sizes);
//                              sum 214 lookups per sample.
// All lists are in column order C1..C26 (cat_0..cat_25).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace tessera {

inline constexpr std::array<int64_t, 26> kCriteoKaggleTableRows = {
    1460, 583,   10131227, 2202608, 305, 24, 12517, 633,     3,  93145,  5683, 8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,   7046547, 18, 15,     286181, 105, 142572};

inline constexpr std::array<int64_t, 26> kCriteo1TbMlperfTableRows = {
    40000000, 39060, 17295,    7424,     20265,    3,      7122,  1543, 63,
    40000000, 3067956, 405282, 10,       2209,     11938,  155,   4,    976,
    14,       40000000, 40000000, 40000000, 590152, 12973, 108,   36};

inline constexpr std::array<int64_t, 26> kMlperfMultiHotSizes = {
    3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};

// The table-rows preset called `name` ("criteo_kaggle", "criteo_1tb_mlperf"), or nullopt.
inline std::optional<std::vector<int64_t>> TableRowsPreset(std::string_view name) {
  if (name == "criteo_kaggle")
    return std::vector<int64_t>(kCriteoKaggleTableRows.begin(), kCriteoKaggleTableRows.end());
  if (name == "criteo_1tb_mlperf")
    return std::vector<int64_t>(kCriteo1TbMlperfTableRows.begin(),
                                kCriteo1TbMlperfTableRows.end());
  return std::nullopt;
}

// The pooling preset called `name`: "mlperf_multi_hot" (the sizes above) or
// "mlperf_multi_hot_half" (each halved, rounded up), or nullopt.
inline std::optional<std::vector<int64_t>> PoolingPreset(std::string_view name) {
  if (name == "mlperf_multi_hot")
    return std::vector<int64_t>(kMlperfMultiHotSizes.begin(), kMlperfMultiHotSizes.end());
  if (name == "mlperf_multi_hot_half") {
    std::vector<int64_t> half;
    for (int64_t s : kMlperfMultiHotSizes) half.push_back((s + 1) / 2);
    return half;
  }
  return std::nullopt;
}

}  // namespace tessera
