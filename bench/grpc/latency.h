// A fixed-size latency histogram: 64 sub-buckets per power of two of
// nanoseconds (at most 1/64 = 1.6% relative error), so a run of any length
// keeps 20 KB per thread. Not thread-safe: one per thread, merged at the end.
#ifndef CACHEROUTE_BENCH_GRPC_LATENCY_H
#define CACHEROUTE_BENCH_GRPC_LATENCY_H

#include <cstdint>
#include <vector>

namespace loadgen {

class Latency {
 public:
  Latency() : counts_(kBuckets, 0) {}

  void Add(uint64_t ns) {
    ++counts_[Bucket(ns)];
    ++n_;
  }

  void Merge(const Latency& o) {
    for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    n_ += o.n_;
  }

  uint64_t count() const { return n_; }

  // Nearest-rank quantile q in [0, 1], in microseconds (the bucket's middle);
  // 0 when empty.
  double QuantileUs(double q) const {
    if (n_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(n_));
    if (rank >= n_) rank = n_ - 1;
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen > rank) return (Low(i) + Low(i + 1)) / 2e3;
    }
    return Low(kBuckets) / 1e3;
  }

 private:
  static constexpr int kSub = 6;  // 2^6 sub-buckets per octave
  static constexpr int kBuckets = (64 - kSub + 1) << kSub;

  static int Bucket(uint64_t ns) {
    if (ns < (1u << kSub)) return static_cast<int>(ns);
    int msb = 63 - __builtin_clzll(ns);
    int shift = msb - kSub;
    return ((shift + 1) << kSub) | static_cast<int>((ns >> shift) & ((1u << kSub) - 1));
  }

  // The smallest value in bucket i.
  static double Low(int i) {
    int oct = i >> kSub, sub = i & ((1 << kSub) - 1);
    if (oct == 0) return sub;
    return static_cast<double>((uint64_t{1} << kSub) + sub) *
           static_cast<double>(uint64_t{1} << (oct - 1));
  }

  std::vector<uint64_t> counts_;
  uint64_t n_ = 0;
};

}  // namespace loadgen

#endif
