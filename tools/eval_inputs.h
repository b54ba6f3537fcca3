// tessera-train --eval-only --inputs FILE: the eval set's model inputs as one safetensors file,
// so another framework can score exactly what Tessera scored (tools/to_torchrec.py --check):
//   dense          [N, num_dense] F32  preprocessed dense features (Criteo: log(1 + max(x, 0)))
//   labels         [N] F32
//   lengths.<f>    [N] I64            ids per sample of sparse feature f (0-based)
//   ids.<f>        [sum lengths] I64  the ids, reduced to the table's rows, sample after sample
//   weights.<f>    [sum lengths] F32  per-id weights, when the data has them
// in the order of the eval data (that of --scores). Single process.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "io/reader.h"
#include "trainer/safetensors.h"

namespace tessera {

inline absl::Status WriteEvalInputs(BatchReader& eval, const std::string& path) {
  TESSERA_RETURN_IF_ERROR(eval.Rewind());
  std::vector<float> dense, labels;
  std::vector<std::vector<int64_t>> ids, lengths;
  std::vector<std::vector<float>> weights;
  int64_t num_dense = 0;
  Batch batch;
  while (true) {
    TESSERA_ASSIGN_OR_RETURN(bool more, eval.Next(&batch));
    if (!more) break;
    num_dense = batch.num_dense;
    dense.insert(dense.end(), batch.dense.begin(), batch.dense.end());
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
    const KeyedJagged& kj = batch.sparse;
    if (ids.empty()) {
      ids.resize(kj.num_features);
      lengths.resize(kj.num_features);
      weights.resize(kj.num_features);
    }
    for (int f = 0; f < kj.num_features; ++f) {
      const int64_t* off = kj.feature_offsets(f);
      for (int64_t b = 0; b < kj.batch_size; ++b) {
        lengths[f].push_back(off[b + 1] - off[b]);
        for (int64_t i = off[b]; i < off[b + 1]; ++i) {
          ids[f].push_back(kj.values[i]);
          if (!kj.weights.empty()) weights[f].push_back(kj.weights[i]);
        }
      }
    }
  }
  const int64_t n = static_cast<int64_t>(labels.size());
  std::vector<TensorSpec> specs = {{"dense", SafetensorsDtype::kF32, {n, num_dense}},
                                   {"labels", SafetensorsDtype::kF32, {n}}};
  for (size_t f = 0; f < ids.size(); ++f) {
    specs.push_back({absl::StrCat("lengths.", f), SafetensorsDtype::kI64, {n}});
    specs.push_back(
        {absl::StrCat("ids.", f), SafetensorsDtype::kI64, {static_cast<int64_t>(ids[f].size())}});
    if (!weights[f].empty()) {
      specs.push_back({absl::StrCat("weights.", f), SafetensorsDtype::kF32,
                       {static_cast<int64_t>(weights[f].size())}});
    }
  }
  TESSERA_ASSIGN_OR_RETURN(auto w, SafetensorsWriter::Create(
                                       path, specs, {{"producer", "tessera"}, {"what", "eval inputs"}}));
  TESSERA_RETURN_IF_ERROR(w->WriteTensor("dense", dense.data()));
  TESSERA_RETURN_IF_ERROR(w->WriteTensor("labels", labels.data()));
  for (size_t f = 0; f < ids.size(); ++f) {
    TESSERA_RETURN_IF_ERROR(w->WriteTensor(absl::StrCat("lengths.", f), lengths[f].data()));
    TESSERA_RETURN_IF_ERROR(w->WriteTensor(absl::StrCat("ids.", f), ids[f].data()));
    if (!weights[f].empty()) {
      TESSERA_RETURN_IF_ERROR(w->WriteTensor(absl::StrCat("weights.", f), weights[f].data()));
    }
  }
  return w->Finish();
}

}  // namespace tessera
