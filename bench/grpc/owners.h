// Owner ids for the load generator: a seeded draw of owner indexes from one
// distribution, mapped to hash-like ids, and the RecordArrivalRequest bodies
// built from them.
#ifndef CACHEROUTE_BENCH_GRPC_OWNERS_H
#define CACHEROUTE_BENCH_GRPC_OWNERS_H

#include <cstdint>
#include <string>

namespace loadgen {

enum class Dist { kFixed, kCycle, kUniform, kZipf };

// Parses "fixed", "cycle", "uniform" or "zipf"; false for anything else.
bool ParseDist(const std::string& s, Dist* out);
const char* DistName(Dist d);

// The owner id of index i: splitmix64(i) with the top bit cleared, as
// grpc_bench.py's _owner(i), so index 0 is the h2load scenarios' owner and
// every id is a full-size (9-byte) varint on the wire.
int64_t OwnerId(uint64_t i);

// xoshiro256** seeded through splitmix64: fast, and the same stream for the
// same seed on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, n), n >= 1 (Lemire's multiply-shift; the bias is below
  // n / 2^64, nothing at these sizes).
  uint64_t Below(uint64_t n);
  // Uniform in (0, 1].
  double Unit();

 private:
  uint64_t s_[4];
};

// Zipf over ranks 0..n-1 (rank r drawn with weight 1 / (r + 1)^s), by
// rejection-inversion (Hörmann and Derflinger 1996): O(1) time per draw and
// no table, whatever n. s > 0, n >= 1.
class Zipf {
 public:
  Zipf(uint64_t n, double s);
  uint64_t Draw(Rng* rng) const;

 private:
  double H(double x) const;
  double HIntegral(double x) const;
  double HIntegralInverse(double x) const;
  uint64_t n_;
  double s_, h_x1_, h_n_, sdiv_;
};

// Draws owner indexes in [0, n): fixed (always 0), cycle (0, 1, ..., n-1,
// 0, ...; `start` is where this source begins), uniform or Zipf(s). One source
// per thread: not thread-safe.
class OwnerSource {
 public:
  OwnerSource(Dist dist, uint64_t n, double zipf_s, uint64_t seed,
              uint64_t start);
  uint64_t NextIndex();
  int64_t NextOwner() { return OwnerId(NextIndex()); }

 private:
  Dist dist_;
  uint64_t n_;
  uint64_t next_;
  Rng rng_;
  Zipf zipf_;
};

// Serializes a RecordArrivalRequest with k owners drawn from `src` (and
// omit_routes) into *out, replacing its contents; the generated message
// class does the encoding, so the bytes are what any protobuf client sends.
void BuildBody(OwnerSource* src, int k, bool omit_routes, std::string* out);

}  // namespace loadgen

#endif
