// InputPacker (input_packer.h): a ShardLayout of routing only (BuildRouting) and its InputDist.
#include "sharding/input_packer.h"

#include "core/status.h"
#include "sharding/internal/input_dist.h"
#include "sharding/internal/shard_layout.h"

namespace tessera {

struct InputPacker::Impl {
  internal::ShardLayout layout;
  std::unique_ptr<internal::InputDist> input;
  internal::PackedInput packed;
};

InputPacker::InputPacker() : impl_(std::make_unique<Impl>()) {}
InputPacker::~InputPacker() = default;

absl::StatusOr<std::unique_ptr<InputPacker>> InputPacker::Create(
    const EmbeddingCollectionOptions& co, const ShardingPlan& plan, int n) {
  if (n < 1) return absl::InvalidArgumentError("InputPacker: group size must be >= 1");
  std::unique_ptr<InputPacker> p(new InputPacker());
  internal::ShardLayout& l = p->impl_->layout;
  l.options.collection = co;
  l.ctx = l.host = DeviceContext::Cpu();
  l.n = n;
  l.m = 1;
  l.me = 0;
  TESSERA_ASSIGN_OR_RETURN(l.plan, ValidateShardingPlan(plan, co.tables, n, "packing plan"));
  TESSERA_RETURN_IF_ERROR(internal::BuildRouting(&l));
  p->impl_->input = std::make_unique<internal::InputDist>(l);
  return p;
}

absl::StatusOr<int64_t> InputPacker::Pack(const KeyedJagged& batch) {
  Impl& s = *impl_;
  s.input->Pack(batch, /*keep_batch=*/true, &s.packed);
  if (!s.packed.bad.ok()) return s.packed.bad;
  // The header per destination: batch size, flags, then per request its unique-id count and
  // per feature its position count.
  int64_t unique = 0;
  for (int d = 0; d < s.layout.n; ++d) {
    const int64_t* h = s.packed.header.data() + s.packed.hdispl[d] + 2;
    for (int ri : s.layout.dst_requests[d]) {
      unique += *h;
      h += 1 + s.layout.NumFeatures(s.layout.requests[ri].table);
    }
  }
  return unique;
}

int InputPacker::num_requests() const { return static_cast<int>(impl_->layout.requests.size()); }

}  // namespace tessera
